"""HotSpot's own description of its structures, read from a running JVM (the start of Java frames)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hotstack.runtimes.hotspot.vmstructs import read_vmstructs, vm_release

pytestmark = pytest.mark.root


def _java() -> str:
    home = os.environ.get("JAVA_HOME", "")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        pytest.skip("no java on this machine")
    return java


def test_vmstructs_of_a_running_jvm(tmp_path):
    java = _java()
    src = tmp_path / "Sleep.java"
    src.write_text('public class Sleep { public static void main(String[] a) throws Exception {'
                   ' System.out.println("ready"); Thread.sleep(60000); } }\n')
    version = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    proc = subprocess.Popen([java, str(src)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        structs = read_vmstructs(proc.pid)
        assert structs is not None
        release = vm_release(proc.pid, structs)
        assert release and release.split(".")[0] in version, (release, version)
        # what a Java frame walker needs: Method -> ConstMethod -> ConstantPool -> holder and names
        for key in (("Method", "_constMethod"), ("ConstMethod", "_constants"), ("ConstMethod", "_name_index"),
                    ("ConstantPool", "_pool_holder"), ("Klass", "_name"), ("Symbol", "_length"),
                    ("Symbol", "_body"), ("CodeBlob", "_frame_size"), ("CodeHeap", "_segmap")):
            assert key in structs.offsets, key
        assert structs.sizes["Method"] > 0 and structs.sizes["ConstantPool"] > 0
    finally:
        proc.kill()
        proc.wait()


def test_not_a_jvm():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert read_vmstructs(proc.pid) is None
    finally:
        proc.kill()
        proc.wait()
