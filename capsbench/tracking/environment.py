"""What a reader needs to trust or reproduce a number: package versions, git commit and dirty flag, device, the machine
(CPU model, GPUs), and who wrote a run (host, pid and process start, so that a run left RUNNING by a killed process
can be recognised)."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = ("capsbench", "torch", "torchvision", "torchattacks", "mlflow", "fvcore", "numpy")


def environment_tags(device: str) -> dict[str, str]:
    """Package versions, git commit (and whether the tree had uncommitted changes), device name and TF32 state."""
    import torch

    tags = {f"version.{p}": _version(p) for p in PACKAGES}
    tags["version.python"] = platform.python_version()
    commit, dirty = git_state()
    tags.update({"git.commit": commit, "git.dirty": str(dirty).lower()})
    if device.startswith("cuda"):
        tags["device.name"] = torch.cuda.get_device_name(torch.device(device))
        tags["device.tf32"] = str(torch.backends.cuda.matmul.allow_tf32)
    else:
        tags["device.name"] = f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    tags["device"] = device
    return {**tags, **machine_tags()}


def machine_tags() -> dict[str, str]:
    """The machine a number was measured on: CPU model, logical CPUs, the vector instructions torch's CPU kernels use
    (AVX2, AVX512, ...: oneDNN and MKL pick their code paths, and so their rounding, by it), and every CUDA GPU. CPU
    summation order and kernels differ between machines, so a trained model is reproducible per machine, not across
    them (docs/outputs.md)."""
    import torch

    cuda = torch.cuda.is_available()
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    return {"machine.cpu": cpu_model(), "machine.cpus": str(os.cpu_count() or "unknown"),
            "machine.cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine.gpus": ", ".join(gpus) or "none"}


def cpu_model() -> str:
    """The CPU's model name: /proc/cpuinfo on Linux, sysctl on macOS, else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                 timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    return platform.processor() or platform.machine() or "unknown"


def process_tags() -> dict[str, str]:
    """host, pid and the process's start time (from /proc where there is one)."""
    return {"host": platform.node(), "pid": str(os.getpid()), "process.start": process_start(os.getpid()) or "unknown"}


def process_start(pid: int) -> str | None:
    """The kernel's start time of process `pid` (clock ticks since boot), None when unknown or gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counted after the command name in parentheses


def process_alive(pid: int, start: str | None) -> bool:
    """Whether the process that wrote a run is still running: same pid and, where known, the same start time."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return start in (None, "unknown") or process_start(pid) == start


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def git_state() -> tuple[str, bool]:
    """(HEAD commit or "unknown", whether tracked files have uncommitted changes) of the checkout capsbench runs
    from."""
    repo = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            return "unknown", False
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", False
    return out.stdout.strip(), bool(dirty.stdout.strip())
