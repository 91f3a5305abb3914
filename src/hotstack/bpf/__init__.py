"""The BPF programs' C sources and their committed objects (built by `make bpf`)."""

from importlib import resources


def object_path(name: str) -> str:
    """Path of the committed object `<name>.bpf.o` inside the installed package."""
    return str(resources.files(__name__).joinpath(f"{name}.bpf.o"))
