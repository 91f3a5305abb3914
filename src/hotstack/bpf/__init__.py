"""The BPF programs' C sources and their committed objects (built by `make bpf`)."""

import os

# The objects lie beside this module in the installed package (a wheel installs files; a program is
# loaded from a path). importlib.resources, which also serves zipped packages, cost ~9 ms of a
# ~0.33 CPU-s start (its import, its readers and zipfile's).
_HERE = os.path.dirname(os.path.abspath(__file__))

# Objects per machine (`uname -m`): the register layout of the programs' contexts differs (bpf/arch.h).
# x86-64's keep the plain name; another architecture's carry its name: profile.arm64.bpf.o.
_SUFFIX = {"x86_64": "", "aarch64": ".arm64", "arm64": ".arm64"}


class UnsupportedMachine(RuntimeError):
    """No BPF objects are built for this machine."""


def object_suffix(machine: str | None = None) -> str:
    machine = machine or os.uname().machine
    try:
        return _SUFFIX[machine]
    except KeyError:
        raise UnsupportedMachine(f"hotstack's BPF programs are built for x86_64 and aarch64, not {machine}") from None


def object_path(name: str, machine: str | None = None) -> str:
    """Path of the committed object of program `name` for this machine (or `machine`) inside the
    installed package: <name>.bpf.o on x86-64, <name>.arm64.bpf.o on arm64."""
    return os.path.join(_HERE, f"{name}{object_suffix(machine)}.bpf.o")
