"""A claim whose verdict is fixed by construction is refused when the claim files load: the guard compares the sides as
they will be measured (defaults resolved) under the declared containments, in both directions and for margins; a
claim that can go either way loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsbench.errors import CapsbenchError
from capsbench.reporting.claim_files import load_claims_file


def write(tmp_path: Path, better: str, worse: str, sweep: str = "{attack: worst_case, eps: 0.1}",
          extra: str = "", suite: str = "robustness", metric: str = "robust_accuracy") -> Path:
    path = tmp_path / "x.yaml"
    path.write_text("source: {id: x, citation: 'A. Author. Paper. 2020', arxiv: '1907.02957'}\nclaims:\n"
                    f"  - {{id: x-1, statement: s, where: Abstract, suite: {suite}, dataset: mnist, metric: {metric},"
                    f" sweep: {sweep}, better: {better}, worse: {worse}{extra}}}\n")
    return path


REFUSED = {
    "correct or detected against correct": ("{model: capsnet, metric: correct_or_detected}", "{model: capsnet}",
                                            "{attack: worst_case, eps: 0.1}", "", "cannot fail"),
    "the claim's own attack repeated on one side": ("{model: capsnet, sweep: {attack: pgd}}", "{model: capsnet}",
                                                    "{attack: pgd, eps: 0.1}", "", "the same measurement"),
    "the default routing against the default": ("{model: capsnet, model_args: {routing_iterations: 3}}",
                                                "{model: capsnet}", "{attack: pgd, eps: 0.1}", "",
                                                "the same measurement"),
    "PGD against the worst case": ("{model: capsnet, sweep: {attack: pgd}}", "{model: capsnet}",
                                   "{attack: worst_case, eps: 0.1}", "", "cannot fail"),
    "the worst case against PGD": ("{model: capsnet}", "{model: capsnet, sweep: {attack: pgd}}",
                                   "{attack: worst_case, eps: 0.1}", "", "cannot hold"),
    "eps 0.05 against 0.1": ("{model: capsnet, sweep: {eps: 0.05}}", "{model: capsnet}",
                             "{attack: worst_case, eps: 0.1}", "", "cannot fail"),
    "eps 0.1 against 0.05": ("{model: capsnet}", "{model: capsnet, sweep: {eps: 0.05}}",
                             "{attack: worst_case, eps: 0.1}", "", "cannot hold"),
    "PGD at eps 0.05 against the worst case at 0.1": ("{model: capsnet, sweep: {attack: pgd, eps: 0.05}}",
                                                      "{model: capsnet}", "{attack: worst_case, eps: 0.1}", "",
                                                      "cannot fail"),
    "clean against robust": ("{model: capsnet, metric: clean_accuracy}", "{model: capsnet}",
                             "{attack: worst_case, eps: 0.1}", "", "cannot fail"),
    "no better with the subset metric on the better side": ("{model: capsnet}",
                                                            "{model: capsnet, metric: correct_or_detected}",
                                                            "{attack: worst_case, eps: 0.1}",
                                                            ", relation: no_better, margin: 5", "cannot fail"),
}


@pytest.mark.parametrize("better, worse, sweep, extra, why", REFUSED.values(), ids=list(REFUSED))
def test_a_claim_fixed_by_construction_is_refused(tmp_path, better, worse, sweep, extra, why):
    with pytest.raises(CapsbenchError, match=f"'claims\\[0\\]' cannot be decided by data: .*{why}"):
        load_claims_file(write(tmp_path, better, worse, sweep, extra))


def test_a_parity_claim_on_one_exact_count_is_refused_and_on_two_models_loads(tmp_path):
    same = write(tmp_path, "{model: capsnet, model_args: {routing_iterations: 3}}", "{model: capsnet}",
                 "{part: total}", ", relation: parity, margin: 0.1", "efficiency", "params")
    with pytest.raises(CapsbenchError, match="the same measurement"):
        load_claims_file(same)
    two = write(tmp_path, "{model: capsnet}", "{model: cnn_9x9}", "{part: total}", ", relation: parity, margin: 0.5",
                "efficiency", "params")
    assert load_claims_file(two)[0].relation == "parity"


@pytest.mark.parametrize("better, worse, extra", [
    ("{model: capsnet, sweep: {attack: pgd}}", "{model: capsnet, sweep: {attack: vote}}", ""),  # two attacks
    ("{model: capsnet, metric: correct_or_detected, sweep: {attack: pgd_detect_aware}}",
     "{model: capsnet, sweep: {attack: pgd_adaptive}}", ""),  # the detector against another attack's mistakes
    ("{model: capsnet, model_args: {routing_iterations: 1}}", "{model: capsnet}", ", relation: no_better, margin: 5"),
    ("{model: capsnet, metric: clean_accuracy}", "{model: capsnet}", ", relation: parity, margin: 5"),
    ("{model: capsnet, metric: correct_or_detected}", "{model: capsnet}", ", relation: no_better, margin: 5"),
    ("{model: capsnet}", "{model: cnn_sabour}", ""),
])
def test_a_claim_that_can_go_either_way_loads(tmp_path, better, worse, extra):
    assert load_claims_file(write(tmp_path, better, worse, extra=extra))
