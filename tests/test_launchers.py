"""The Ray and SLURM (submitit) launchers: units grouped by the checkpoint they share, workers' answers read by the
driver, a missing extra refused before anything runs, and on real MNIST the same records as the local launcher with a
worker killed mid-unit (Ray retries it) and a unit that fails in its worker on every try (missing, the rest kept)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from composing import compose, compose_suites, suite_budget
from conftest import MNIST_ROOT
from mlflow.tracking import MlflowClient

from capsbench.errors import CapsbenchError
from capsbench.run import driver
from capsbench.run.launchers import remote
from capsbench.run.plan import plan, suite_plan
from capsbench.run.units import UnitResult

SMOKE = ["budget=smoke", "device=cpu", "threads=1"]
GRID = ["suite=[accuracy,robustness]", *SMOKE, "train.epochs=2", "models=[cnn_9x9,cnn_sabour]", "seeds=[0,1]",
        "data.train_subset=500", "data.val_subset=200", "data.test_subset=200", f"data.root={MNIST_ROOT}",
        "data.download=false"]
TIMING = {"attack_throughput"}  # images per second: the machine's load, not the launcher


def rows(
    out: Path, suite: str, *, without: tuple[str, int] | None = None, seeds: tuple[int, ...] = (0, 1)
) -> list[dict]:
    """The suite's records but timings, without one (model, seed)."""
    records = [json.loads(line) for line in (out / suite / "records.jsonl").read_text().splitlines()]
    return [
        r for r in records if r["metric"] not in TIMING and (r["model"], r["seed"]) != without and r["seed"] in seeds
    ]


def block_figure(args: list[str], seed: int) -> None:
    """The injected failure: a directory where robustness/cnn_sabour-s<seed> of the run of `args` writes its figure
    (under the unit store, by the unit's key), so that unit raises IsADirectoryError in its worker on every try; it goes
    through the filesystem the workers share, no test hook."""
    run = suite_plan(compose_suites(args))
    (unit,) = [u for s in run.sections for u in s.units
               if (u.suite, u.model, u.seed) == ("robustness", "cnn_sabour", seed)]
    blocked = (Path(run.cfg.output_dir) / "robustness" / "units" / unit.key / "figures"
               / f"adversarial_examples-cnn_sabour-s{seed}.png")
    blocked.mkdir(parents=True)
    (blocked / "keep").write_text("a directory where the unit's figure goes")


def test_units_sharing_a_checkpoint_are_grouped_across_suites(tmp_path):
    cfgs = compose_suites([*GRID[:-2], f"output_dir={tmp_path}", "tracking.enabled=false"])
    units = [u for cfg in cfgs for u in plan(cfg)]
    groups = remote.groups(units)
    assert sorted((g[0].model, g[0].seed, [u.suite for u in g]) for g in groups) == [
        (m, s, ["accuracy", "robustness"]) for m in ("cnn_9x9", "cnn_sabour") for s in (0, 1)
    ]
    shorter = plan(compose(["suite=accuracy", *SMOKE, "train.epochs=2", f"output_dir={tmp_path}"]))
    affine = plan(compose(["suite=affine", *SMOKE, f"output_dir={tmp_path}"]))
    efficiency = plan(compose(["suite=efficiency", *SMOKE, f"output_dir={tmp_path}", "models=[cnn_9x9]"]))
    accuracy = plan(compose(["suite=accuracy", *SMOKE, f"output_dir={tmp_path}"]))
    mixed = remote.groups([accuracy[0], shorter[0], affine[0], efficiency[0]])
    assert [len(g) for g in mixed] == [1, 1, 1, 1]  # other epochs, another training protocol, nothing to train


@pytest.mark.parametrize(
    "setting",
    [
        "train.adversarial=pgd",
        "train.optimizer=sgd",
        "train.warmup_epochs=1",
        "train.weight_decay=0.0001",
        "train.lr_milestones=[1]",
        "train.compile=true",
    ],
)
def test_units_trained_differently_are_never_grouped(tmp_path, setting):
    """training_group keys on the same train settings as the checkpoint key (training.train_settings_identity)."""
    standard = plan(compose(["suite=accuracy", *SMOKE, f"output_dir={tmp_path}", "models=[cnn_9x9]"]))
    other = plan(compose(["suite=accuracy", *SMOKE, f"output_dir={tmp_path}", "models=[cnn_9x9]", setting]))
    assert [len(g) for g in remote.groups([standard[0], other[0]])] == [1, 1]


def test_worker_answers_are_read_by_the_driver(tmp_path):
    (unit,) = plan(compose(["suite=accuracy", *SMOKE, f"output_dir={tmp_path}", "models=[cnn_9x9]"]))
    answer = UnitResult(key=unit.key, spec=unit, status="done", records=[{"metric": "m", "value": 1.0}]).to_dict()
    assert remote.unpack(unit, answer).records == [{"metric": "m", "value": 1.0}]
    with pytest.raises(CapsbenchError, match="data.root .* does not exist"):
        remote.unpack(unit, {"fatal": "data.root /x does not exist (on host n1)"})
    with pytest.raises(CapsbenchError, match="another capsbench version or code"):
        remote.unpack(unit, {**answer, "key": "0" * 20})
    assert remote.measure_entry(unit.to_dict(), {"fatal": "no data"}) == {"fatal": "no data"}  # training failed so


def test_retrain_is_honoured_once_per_checkpoint(tmp_path):
    """With retrain=true a group's training task retrains; its units then load that checkpoint, while a unit that
    trains its own checkpoint still retrains it. Neither changes the unit's key."""
    slurm_jobs = pytest.importorskip("capsbench.run.launchers.slurm_jobs")
    (unit,) = plan(compose(["suite=accuracy", *SMOKE, f"output_dir={tmp_path}", "models=[cnn_9x9]", "retrain=true"]))
    assert remote.after_training(unit).config["retrain"] is False and remote.after_training(unit).key == unit.key
    assert slurm_jobs.Work("measure", [unit]).spec.config["retrain"] is True
    assert slurm_jobs.Work("measure", [unit], trained=True).spec.config["retrain"] is False


@pytest.mark.parametrize("launcher, extra", [("ray", "ray"), ("slurm", "slurm")])
def test_a_launcher_without_its_extra_is_refused_naming_it(tmp_path, monkeypatch, launcher, extra):
    import importlib.util

    from typer.testing import CliRunner

    from capsbench.cli import app

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in ("ray", "submitit") else real(name, *a)
    )
    result = CliRunner().invoke(
        app, ["run", "suite=accuracy", *SMOKE, f"output_dir={tmp_path}", f"launcher={launcher}"]
    )
    assert result.exit_code == 2
    assert f"needs the '{extra}' extra: pip install 'capsbench[{extra}]'" in result.output
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


@pytest.fixture(scope="module")
def local_grid(tmp_path_factory):
    """The smoke grid run by the local launcher: the reference every other launcher must reproduce."""
    if not (MNIST_ROOT / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").exists():
        pytest.skip(f"real MNIST not found under {MNIST_ROOT} (set CAPSBENCH_DATA)")
    out = tmp_path_factory.mktemp("local")
    driver.run_suites(compose_suites([*GRID, f"output_dir={out}", "tracking.enabled=false"]))
    return out


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (Linux /proc)."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        parent[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        frontier = [p for p, pp in parent.items() if pp in frontier]
        found += frontier
    return found


def _kill_first_unit_worker(driver: subprocess.Popen, killed: list[int]) -> None:
    """SIGKILL the first Ray worker of this driver seen running a unit (its process title names the task)."""
    while driver.poll() is None and not killed:
        for pid in _descendants(driver.pid):
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if title.startswith("ray::capsbench.unit"):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds Ray's workers through /proc")
def test_ray_grid_equals_local_despite_a_killed_worker_and_reports_a_failing_unit(tmp_path, local_grid):
    pytest.importorskip("ray")
    out = tmp_path / "ray"
    block_figure([*GRID, f"output_dir={out}", "launcher=ray", "ray.num_cpus=2", "ray.max_retries=2"], seed=1)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "capsbench.cli",
            "run",
            *GRID,
            f"output_dir={out}",
            "launcher=ray",
            "ray.num_cpus=2",
            "ray.max_retries=2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    killed: list[int] = []
    killer = threading.Thread(target=_kill_first_unit_worker, args=(driver, killed))
    killer.start()
    stdout, stderr = driver.communicate(timeout=900)
    killer.join()
    assert driver.returncode == 3, stderr[-3000:]  # a unit failed (exit statuses: docs/outputs.md)
    assert len(killed) == 1  # a worker died mid-unit; Ray ran its unit again, so nothing else is missing
    assert rows(out, "accuracy") == rows(local_grid, "accuracy")
    assert rows(out, "robustness") == rows(local_grid, "robustness", without=("cnn_sabour", 1))
    table = (out / "robustness" / "table.md").read_text()
    assert "MISSING robustness/cnn_sabour-mnist-s1: the unit failed (IsADirectoryError" in table
    assert "robustness: tables" in stdout and "1 unit(s) failed and are missing from the tables" in stdout
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])
    parents = {suite_budget(r.info.run_name): r for r in runs if "mlflow.parentRunId" not in r.data.tags}
    assert sorted(parents) == ["accuracy-smoke", "robustness-smoke"]
    assert {n: p.info.status for n, p in parents.items()} == {"accuracy-smoke": "FINISHED",
                                                             "robustness-smoke": "FAILED"}
    for name, parent in parents.items():
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        assert sorted(c.info.run_name for c in children) == sorted(
            f"{m}-mnist-s{s}" for m in ("cnn_9x9", "cnn_sabour") for s in (0, 1)
        )
        failed = [c.info.run_name for c in children if c.info.status == "FAILED"]
        assert failed == (["cnn_sabour-mnist-s1"] if name == "robustness-smoke" else [])


@pytest.mark.slow
def test_submitit_local_jobs_equal_local_and_a_failing_job_is_resubmitted(tmp_path, local_grid, caplog):
    pytest.importorskip("submitit")
    out = tmp_path / "slurm"
    block_figure([*GRID, "seeds=[0]", f"output_dir={out}", "tracking.enabled=false", "launcher=slurm",
                  "slurm.cluster=local", "slurm.gpus_per_unit=0", "slurm.cpus_per_unit=1", "slurm.array_parallelism=2",
                  "slurm.max_retries=1"], seed=0)
    cfgs = compose_suites(
        [
            *GRID,
            "seeds=[0]",
            f"output_dir={out}",
            "tracking.enabled=false",
            "launcher=slurm",
            "slurm.cluster=local",
            "slurm.gpus_per_unit=0",
            "slurm.cpus_per_unit=1",
            "slurm.array_parallelism=2",
            "slurm.max_retries=1",
            "slurm.time=30",
        ]
    )
    with caplog.at_level("WARNING", logger="capsbench.run.launchers.slurm_jobs"):
        accuracy, robustness = driver.run_suites(cfgs)
    assert rows(out, "accuracy") == rows(local_grid, "accuracy", seeds=(0,))
    assert rows(out, "robustness") == rows(local_grid, "robustness", without=("cnn_sabour", 0), seeds=(0,))
    assert [m.spec.name for m in robustness.missing] == ["robustness/cnn_sabour-mnist-s0"] and not accuracy.missing
    assert "IsADirectoryError" in robustness.missing[0].error
    resubmitted = [r.message for r in caplog.records if "resubmitting" in r.message]
    assert (
        len(resubmitted) == 1 and "robustness/cnn_sabour-mnist-s0" in resubmitted[0] and "try 2 of 2" in resubmitted[0]
    )


@pytest.mark.slow
def test_default_settings_give_the_local_numbers_on_ray_and_stream_its_units(tmp_path):
    """The default smoke grid without threads=: on a local Ray (ray.num_cpus=2) every unit runs with the thread count
    the driver fixed, as locally, so the records are identical; the units' MLflow runs got their epoch curves while
    they ran (timestamps before the run's end), through the workers' event queue."""
    pytest.importorskip("ray")
    if not (MNIST_ROOT / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").exists():
        pytest.skip(f"real MNIST not found under {MNIST_ROOT} (set CAPSBENCH_DATA)")
    grid = ["suite=accuracy", "budget=smoke", "device=cpu", "models=[capsnet,cnn_sabour]", "seeds=[0,1]",
            "train.epochs=2", "data.train_subset=500", "data.val_subset=200", "data.test_subset=200",
            f"data.root={MNIST_ROOT}", "data.download=false"]
    local, out = tmp_path / "local", tmp_path / "ray"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    for args in ([f"output_dir={local}", "tracking.enabled=false"], [f"output_dir={out}", "launcher=ray",
                                                                       "ray.num_cpus=2"]):
        done = subprocess.run([sys.executable, "-m", "capsbench.cli", "run", *grid, *args], capture_output=True,
                              text=True, env=env, timeout=900)  # fresh processes: each driver's default threads
        assert done.returncode == 0, done.stderr[-3000:]
    assert rows(out, "accuracy") == rows(local, "accuracy")
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    units = [r for r in client.search_runs([client.get_experiment_by_name("capsbench").experiment_id])
             if "mlflow.parentRunId" in r.data.tags]
    assert len(units) == 4 and len({u.data.params["threads"] for u in units}) == 1
    assert all(u.data.params["checkpoint.train_threads"] == u.data.params["threads"] for u in units)  # as fixed
    for unit in units:
        curve = client.get_metric_history(unit.info.run_id, "val/accuracy")
        assert [m.step for m in curve] == [1, 2] and curve[-1].timestamp < unit.info.end_time
        assert unit.info.start_time <= curve[0].timestamp



@pytest.mark.parametrize("settings, words", [
    (["launcher=slurm", "slurm.cluster=local"], "would start 16 unit processes on this machine's GPU"),
    (["launcher=ray", "ray.gpus_per_unit=0.5"], "ray.gpus_per_unit=0.5 lets several tasks onto one GPU"),
])
def test_a_cuda_run_never_starts_several_unit_processes_on_one_gpu(settings, words):
    """Processes time-slice a GPU: 13 unit processes on one H200 ran more than 10x slower than one process."""
    with pytest.raises(CapsbenchError, match=words):
        compose(["suite=accuracy", "device=cuda", *settings], resolve_device=False)
    compose(["suite=accuracy", "device=cuda", *settings, "slurm.array_parallelism=1", "ray.gpus_per_unit=1"],
            resolve_device=False)  # one process per GPU: allowed


@pytest.mark.slow
def test_a_ray_started_here_requires_a_token_of_its_own_that_no_file_holds(tmp_path, monkeypatch):
    """Ray binds its servers to every interface, so the Ray a run starts requires a token made for that run: its
    workers hold it, no file does (not ~/.ray/auth_token), and the settings it replaced come back afterwards; a second
    run in the same process starts its own Ray with a new token."""
    pytest.importorskip("ray")
    import ray
    from ray._raylet import AuthenticationMode, get_authentication_mode

    from capsbench.run.launchers import ray_tasks

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a user's setting: overridden for the Ray capsbench starts
    seen = {}

    def probe(self, units, on_event):
        seen["mode"] = get_authentication_mode()
        seen["worker"] = ray.get(ray.remote(lambda: (os.environ.get("RAY_AUTH_MODE"),
                                                     os.environ.get("RAY_AUTH_TOKEN", ""))).remote())
        seen["python"] = ray.get(ray.remote(lambda: sys.executable).remote())
        yield from ()

    monkeypatch.setattr(ray_tasks.RayLauncher, "_run", probe)
    cfg = compose(["suite=accuracy", "budget=smoke", "device=cpu", "launcher=ray", "ray.num_cpus=1",
                   f"output_dir={tmp_path / 'out'}"])
    tokens = set()
    for _ in range(2):  # a second run in one process gets a token of its own, and its driver uses it (not the first's)
        assert list(ray_tasks.RayLauncher(cfg).run(plan(cfg)[:1], lambda event: None)) == []
        mode, token = seen.pop("worker")
        assert mode == "token" and len(token) == 64 and seen["mode"] == AuthenticationMode.TOKEN
        tokens.add(token)
    assert len(tokens) == 2
    # the workers run this interpreter (Ray was imported before capsbench here): under `uv run` Ray's hook would rebuild
    # the project for them in its session folder, gigabytes from the package index with HOME pointing at an empty cache
    assert seen["python"] == sys.executable
    assert not (tmp_path / ".ray" / "auth_token").exists() and not ray.is_initialized()
    assert os.environ["RAY_AUTH_MODE"] == "disabled" and "RAY_AUTH_TOKEN" not in os.environ
    assert get_authentication_mode() == AuthenticationMode.DISABLED


@pytest.mark.slow
def test_units_sending_events_keep_their_cpu_so_ray_runs_no_more_units_than_cpus(tmp_path, monkeypatch):
    """A task that waits on Ray lends its CPU to the next task: when each event waited for the queue, a Ray of one
    CPU ran two of these three units at once. Sent without waiting, they run one after another, and every event is on
    the queue before its unit's result."""
    pytest.importorskip("ray")
    import ray
    from ray.util.queue import Queue

    from capsbench.run.launchers import ray_tasks
    from capsbench.run.units import UnitEvent

    def unit(sink, key):
        start = time.time()
        for step in range(30):
            sink(UnitEvent(key, "measured", {"passes": step}))
            until = time.time() + 0.2
            while time.time() < until:  # busy, like a unit measuring
                pass
        sink.delivered()
        return start, time.time()

    seen = {}

    def probe(self, units, on_event):
        queue = Queue(actor_options={"num_cpus": 0})
        sink = ray_tasks.QueueSink(queue)
        task = ray.remote(unit).options(**self.task_options())
        seen["spans"] = sorted(ray.get([task.remote(sink, f"u{i}") for i in range(3)]))
        seen["events"] = queue.get_nowait_batch(queue.qsize())
        queue.shutdown()
        yield from ()

    monkeypatch.setattr(ray_tasks.RayLauncher, "_run", probe)
    cfg = compose(["suite=accuracy", "budget=smoke", "device=cpu", "launcher=ray", "ray.num_cpus=1", "threads=1",
                   f"output_dir={tmp_path / 'out'}"])
    assert list(ray_tasks.RayLauncher(cfg).run(plan(cfg)[:1], lambda event: None)) == []
    spans = seen["spans"]
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:])), spans
    assert sorted((e["key"], e["data"]["passes"]) for e in seen["events"]) == [(f"u{i}", s) for i in range(3)
                                                                               for s in range(30)]
