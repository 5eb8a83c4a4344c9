"""Published numbers: the shipped baselines validate, bad files fail naming file and key, cells match by model args."""

import pytest

from capsbench.errors import CapsbenchError
from capsbench.reporting.baselines import Published, load_baselines, load_file, matching


def test_shipped_baselines_validate_and_carry_sources():
    entries = load_baselines()
    assert {e.source.split(".")[0] for e in entries} >= {"S", "G", "V"}  # Sabour, Hinton, Mazzia citations
    by_key = {
        (e.suite, e.dataset, e.model, e.metric, tuple(sorted((k, str(v)) for k, v in e.model_args.items()))): e
        for e in entries
    }
    sabour_r3 = by_key[("accuracy", "mnist", "capsnet", "test_error", (("routing_iterations", "3"),))]
    assert (sabour_r3.value, sabour_r3.std, sabour_r3.where) == (0.25, 0.005, "Table 1")
    assert "arXiv:1710.09829" in sabour_r3.footnote
    assert by_key[("accuracy", "mnist", "cnn_sabour", "test_error", ())].value == 0.39
    assert by_key[("overlap", "mnist", "capsnet", "both_correct_error", (("routing_iterations", "3"),))].value == 5.2
    assert by_key[("overlap", "mnist", "cnn_multimnist", "both_correct_error", ())].value == 8.1
    affnist = by_key[("affine", "mnist", "capsnet", "affnist_accuracy", ())]
    assert affnist.value == 79.0 and affnist.sweep == {"test_set": "affNIST"}  # never beside the generated set
    assert by_key[("affine", "mnist", "cnn_sabour", "affnist_accuracy", ())].value == 66.0
    assert by_key[("accuracy", "smallnorb", "capsnet_em", "test_error", ())].value == 1.8
    effcaps = by_key[("efficiency", "mnist", "effcapsnet", "params", (("decoder_hidden", "[]"),))]
    assert effcaps.value == 0.161824 and effcaps.sweep == {"part": "total"}  # millions, as the suite reports params
    assert by_key[("efficiency", "mnist", "capsnet", "params", (("routing_iterations", "3"),))].value == 8.2
    assert all(e.where and e.protocol for e in entries)


GOOD_ENTRY = (
    "{suite: accuracy, dataset: mnist, model: capsnet, metric: test_error, value: 0.25, where: Table 1, protocol: p}"
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("results: []", "exactly the keys 'source' and 'results'"),
        (f"source: {{citation: c}}\nresults: [{GOOD_ENTRY}]", "'source' lacks the required key 'id'"),
        ("source: {id: x, citation: c}\nresults: []", "'results' must be a non-empty list"),
        (f"source: {{id: x, citation: c, year: 2017}}\nresults: [{GOOD_ENTRY}]", "unknown key 'source.year'"),
        (
            "source: {id: x, citation: c}\nresults: "
            "[{suite: accuracy, dataset: mnist, model: capsnet, metric: test_error, "
            "value: '0.25', where: T1, protocol: p}]",
            "'results[0].value' must be int or float, got '0.25'",
        ),
        (
            "source: {id: x, citation: c}\nresults: "
            "[{suite: accuracy, dataset: mnist, model: capsnet, metric: test_error, "
            "where: T1, protocol: p}]",
            "'results[0]' lacks the required key 'value'",
        ),
        (
            "source: {id: x, citation: c}\nresults: "
            "[{suite: accuracy, dataset: mnist, model: capsnet, metric: test_eror, "
            "value: 0.25, where: T1, protocol: p}]",
            "'results[0].metric' = 'test_eror' is not a metric of suite 'accuracy'",
        ),
        (
            f"source: {{id: x, citation: c}}\nresults: [{GOOD_ENTRY}, "
            f"{{suite: accuracy, dataset: mnist, model: capsnet, "
            "metric: test_error, value: 0.3, std: -1, where: T1, protocol: p}]",
            "'results[1].std' must be >= 0",
        ),
        ("source: {id: x, citation: c\nresults: [", "not valid YAML"),
    ],
)
def test_bad_file_error_names_file_key_and_expectation(tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(CapsbenchError) as err:
        load_file(path)
    assert str(path) in str(err.value) and expected in str(err.value)


def test_empty_directory_is_an_error(tmp_path):
    with pytest.raises(CapsbenchError, match="no baselines"):
        load_baselines(tmp_path)


def _pub(value, **model_args):
    return Published(
        source="S",
        suite="accuracy",
        dataset="mnist",
        model="capsnet",
        metric="test_error",
        value=value,
        where="Table 1",
        protocol="p",
        model_args=model_args,
    )


def test_matching_needs_equal_model_args_and_prefers_the_most_specific():
    entries = [
        _pub(0.25, routing_iterations=3),
        _pub(0.35, routing_iterations=3, decoder_hidden=[]),
        _pub(0.29, routing_iterations=1),
    ]
    with_decoder = {"capsnet": {"routing_iterations": "3", "decoder_hidden": "[64, 128]"}}
    without = {"capsnet": {"routing_iterations": "3", "decoder_hidden": "[]"}}
    r1 = {"capsnet": {"routing_iterations": "1", "decoder_hidden": "[]"}}
    assert [r["value"] for r in matching(entries, suite="accuracy", model_args=with_decoder)] == [0.25]
    assert [r["value"] for r in matching(entries, suite="accuracy", model_args=without)] == [0.35]
    assert [r["value"] for r in matching(entries, suite="accuracy", model_args=r1)] == [0.29]
    assert matching(entries, suite="affine", model_args=with_decoder) == []
    assert matching(entries, suite="accuracy", model_args={"cnn_9x9": {}}) == []
