"""Everything checkable is checked before any work or write: model arguments against each model's
declared ranges, the planned dataset's files (or a download host that answers), an output directory that can be
written, a tracking server that answers. Each failure is one line and exit 2 within 5 s, and nothing is written."""

import http.server
import os
import re
import socket
import threading
import time
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.config import preflight
from capsbench.data.catalog import DATASETS
from capsbench.data.files import DATA_FILES, missing_files
from capsbench.errors import CapsbenchError
from capsbench.models import MODELS, check_model_arguments
from capsbench.models.ranges import check_value, parse_range

RUN = ["run", "suite=accuracy", "budget=smoke", "device=cpu"]


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def refused(args, tmp_path, env=None):
    """The CLI's answer to `args`: (exit code, its one line, seconds), checking that nothing was written."""
    start = time.monotonic()
    result = CliRunner().invoke(app, [*args, f"output_dir={tmp_path / 'out'}"], env=env)
    seconds = time.monotonic() - start
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert list(tmp_path.iterdir()) == [], "something was written"
    return result.exit_code, lines[0], seconds


def test_interval_ranges_read_and_worded():
    r = parse_range("int [1, inf)")
    assert r.contains(1) and r.contains(7) and not r.contains(0) and not r.contains(1.5) and not r.contains(True)
    assert r.words() == "an integer >= 1"
    half = parse_range("[0, 1)")
    assert half.contains(0.0) and half.contains(0.999) and not half.contains(1.0) and not half.contains(-0.1)
    assert half.words() == "a number in [0, 1)"
    assert parse_range("(0, inf)").words() == "a number > 0" and not parse_range("(0, inf)").contains(0)
    with pytest.raises(ValueError, match="not an interval"):
        parse_range("at least one")
    with pytest.raises(CapsbenchError, match=r"x must be a list whose every element is an integer >= 1, got \[2, 0\]"):
        check_value("x", [2, 0], "int [1, inf)")
    check_value("x", [], "int [1, inf)")  # an empty list (e.g. no decoder layers) has no element out of range
    with pytest.raises(CapsbenchError, match="x must be one of 'same', 'valid', got 'full'"):
        check_value("x", "full", ["same", "valid"])


@pytest.mark.parametrize("name", MODELS.names())
def test_every_declared_range_is_readable_and_admits_the_defaults(name):
    """Each model's ARGUMENT_RANGES parse, name real arguments, and accept the model's own defaults."""
    spec = MODELS.get(name)
    ranges, arguments = spec.argument_ranges(), spec.arguments()
    assert set(ranges) <= set(arguments)
    check_model_arguments(name, {k: v for k, v in arguments.items() if k in ranges})


@pytest.mark.parametrize(
    "override, message",
    [
        ("model_args.capsnet.routing_iterations=0", r"model_args\.capsnet\.routing_iterations must be an integer >= 1"),
        ("model_args.cnn_sabour.dropout=1.5", r"cnn_sabour\.dropout must be a number in \[0, 1\), got 1\.5"),
        ("model_args.cnn_9x9.padding=full", r"model_args\.cnn_9x9\.padding must be one of 'same', 'valid'"),
        ("model_args.capsnet_em.routing_iterations=-2", r"capsnet_em\.routing_iterations must be an integer >= 1"),
    ],
)
def test_model_arguments_out_of_their_range_stop_before_work(override, message, tmp_path, mnist_root):
    code, line, seconds = refused([*RUN, override, f"data.root={mnist_root}"], tmp_path)
    assert code == 2 and seconds < 5
    assert re.search(message, line), line


def test_missing_files_are_listed_per_dataset(tmp_path):
    (tmp_path / "MNIST" / "raw").mkdir(parents=True)
    (tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte.gz").write_bytes(b"")
    (tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte").write_bytes(b"")
    assert [p.name for p in missing_files("mnist", tmp_path)] == ["train-labels-idx1-ubyte", "t10k-labels-idx1-ubyte"]
    assert len(missing_files("smallnorb", tmp_path)) == 4 and DATA_FILES["smallnorb"].download_url is None
    assert all(DATA_FILES[n].files for n in DATASETS)  # every dataset declares what it reads


def test_dataset_offline_stops_in_seconds_naming_the_files(tmp_path, monkeypatch):
    """dataset=cifar10 with its files absent and its download host unreachable (an .invalid host never resolves)."""
    root = tmp_path / "data"
    root.mkdir()
    offline = replace(DATA_FILES["cifar10"], download_url="https://capsbench-test.invalid/c.tgz")
    monkeypatch.setitem(DATA_FILES, "cifar10", offline)
    start = time.monotonic()
    result = CliRunner().invoke(app, [*RUN, "dataset=cifar10", f"data.root={root}", f"output_dir={tmp_path / 'o'}"])
    assert time.monotonic() - start < 5 and result.exit_code == 2, result.output
    line = result.output.strip()
    assert "6 file(s) of cifar10 missing" in line and "cifar-10-batches-py/data_batch_1" in line
    assert "capsbench-test.invalid cannot be reached" in line and "\n" not in line
    assert list(tmp_path.iterdir()) == [root] and list(root.iterdir()) == []


def test_a_dataset_that_cannot_be_downloaded_names_where_to_get_it(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    result = CliRunner().invoke(app, [*RUN, "dataset=smallnorb", "models=[cnn_avgpool]", f"data.root={root}",
                                      f"output_dir={tmp_path / 'o'}"])
    assert result.exit_code == 2 and "capsbench cannot download them" in result.output
    assert "https://cs.nyu.edu/~ylclab/data/norb-v1.0-small/" in result.output


def test_unreachable_tracking_server_stops_in_seconds(tmp_path, mnist_root):
    uri = f"http://127.0.0.1:{closed_port()}"
    code, line, seconds = refused([*RUN, f"data.root={mnist_root}", f"tracking.uri={uri}"], tmp_path)
    assert code == 2 and seconds < 5
    assert f"tracking.uri={uri} cannot be reached" in line and "tracking.enabled=false" in line


def test_an_unreachable_tracking_server_is_refused_by_report_without_a_key_it_does_not_take(tmp_path):
    uri = f"http://127.0.0.1:{closed_port()}"
    result = CliRunner().invoke(app, ["report", f"tracking.uri={uri}", f"output_dir={tmp_path / 'o'}"])
    assert result.exit_code == 2 and result.output.startswith(f"error: tracking.uri={uri} cannot be reached (")
    assert result.output.rstrip().endswith("; start the tracking server or fix tracking.uri=")  # no tracking.enabled
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def not_mlflow():
    """A local HTTP server that answers every request with 404, as a port held by something else does."""
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  (http.server's name)
            self.send_error(404)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_a_server_that_is_not_mlflow_stops_in_seconds(tmp_path, mnist_root, not_mlflow):
    code, line, seconds = refused([*RUN, f"data.root={mnist_root}", f"tracking.uri={not_mlflow}"], tmp_path)
    assert code == 2 and seconds < 5, line
    assert f"GET {not_mlflow}/health answered 404: not an MLflow tracking server" in line


def test_an_unreachable_tracking_server_is_refused_by_report_too(tmp_path):
    result = CliRunner().invoke(app, ["report", f"tracking.uri=http://127.0.0.1:{closed_port()}",
                                      f"output_dir={tmp_path / 'out'}"])
    assert result.exit_code == 2 and "cannot be reached" in result.output and list(tmp_path.iterdir()) == []


def test_output_dir_under_a_file_is_refused(tmp_path, mnist_root):
    blocker = tmp_path / "taken"
    blocker.write_text("a file where a directory was expected")
    result = CliRunner().invoke(app, [*RUN, f"data.root={mnist_root}", f"output_dir={blocker / 'out'}"])
    assert result.exit_code == 2
    assert result.output.strip() == (f"error: output_dir {blocker / 'out'} cannot be used as a directory: {blocker} "
                                     "is a file; choose another output_dir=")
    assert sorted(tmp_path.iterdir()) == [blocker]


def test_a_read_only_output_dir_is_refused(tmp_path, mnist_root, monkeypatch):
    """A read-only mount, as access(2) reports it (tests may run as root, for whom chmod does not make one)."""
    out = tmp_path / "ro"
    out.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if str(path) == str(out) else real(path, mode))
    result = CliRunner().invoke(app, [*RUN, f"data.root={mnist_root}", f"output_dir={out}"])
    assert result.exit_code == 2 and f"output_dir {out} is not writable" in result.output
    assert list(out.iterdir()) == []


def test_checks_read_the_machine_without_torch(tmp_path, cli_probe, mnist_root):
    """The bad inputs refused in a fresh interpreter: exit 2 each, torch never imported."""
    port = closed_port()
    probe = cli_probe(
        [*RUN, "model_args.capsnet.routing_iterations=0", f"output_dir={tmp_path / 'a'}"],
        [*RUN, f"data.root={mnist_root}", f"tracking.uri=http://127.0.0.1:{port}", f"output_dir={tmp_path / 'b'}"],
        [*RUN, "dataset=smallnorb", "models=[cnn_avgpool]", f"data.root={mnist_root}", f"output_dir={tmp_path / 'c'}"],
        cwd=tmp_path,
    )
    assert probe.codes == [2, 2, 2] and probe.heavy == [], probe.stderr
    assert list(tmp_path.iterdir()) == []


def test_reachable_gives_up_after_its_timeout(monkeypatch):
    def hangs(address, timeout):
        time.sleep(3)  # a resolver that does not answer
        raise OSError("gave up")

    monkeypatch.setattr(socket, "create_connection", hangs)
    start = time.monotonic()
    assert preflight.reachable("example.org", 443, timeout=0.5) == "no answer within 0.5 s"
    assert time.monotonic() - start < 2
