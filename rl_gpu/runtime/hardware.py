"""What machine a run or a benchmark ran on: versions, device and hardware, recorded next to its results."""

from __future__ import annotations

import os

import torch


def run_environment(device: torch.device) -> dict:
    """Versions, device and hardware, recorded in each run's config.json."""
    import platform
    from importlib import metadata

    versions = {}
    for package in ("rl-gpu", "torch", "numpy", "gymnasium", "tyro"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    info = {"device": str(device), "python": platform.python_version(), "platform": platform.platform(),
            "cpu": cpu, "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "cuda": torch.version.cuda, "packages": versions}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def host_memory_bytes() -> int:
    """The machine's physical memory in bytes (``2**63 - 1`` where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # no sysconf (not POSIX): nothing to compare against
        return 2**63 - 1
