"""The offset table (runtimes/perl/offsets.py) against each perl's own headers (this machine's,
Debian 11-unstable's and experimental's): a C program compiled against them prints offsetof() of every member the
walker and the namer read, which must equal the table's entry for that perl's version."""

from __future__ import annotations

import subprocess
from dataclasses import fields
from pathlib import Path

import pytest

from hotstack.runtimes.perl.offsets import CVF_NAMED, SVT_PVCV, SVT_PVGV, SVT_PVHV, offsets_for
from hotstack.runtimes.perl.source import SVF_OOK
from hotstack.runtimes.perl.frames import CXT_EVAL, CXT_FORMAT, CXT_SUB, CXTYPEMASK
from tests.peers import require_tool
from tests.runtimes.matrix import extracted

# PerlOffsets field -> the C expression it must equal (threaded build: ithreads, MULTIPLICITY)
EXPRESSIONS = {
    "interp_curcop": "offsetof(struct interpreter, Icurcop)",
    "interp_curstackinfo": "offsetof(struct interpreter, Icurstackinfo)",
    "si_cxstack": "offsetof(struct stackinfo, si_cxstack)",
    "si_prev": "offsetof(struct stackinfo, si_prev)",
    "si_cxix": "offsetof(struct stackinfo, si_cxix)",
    "cx_size": "sizeof(PERL_CONTEXT)",
    "cx_oldcop": "offsetof(struct block, blku_oldcop)",
    "cx_sub_cv": "offsetof(struct block, blk_u.blku_sub.cv)",
    "cx_retop": "offsetof(struct block, blk_u.blku_sub.retop)",
    "cop_line": "offsetof(struct cop, cop_line)",
    "cop_file": "offsetof(struct cop, cop_file)",
    "sv_any": "offsetof(struct sv, sv_any)",
    "sv_flags": "offsetof(struct sv, sv_flags)",
    "sv_u": "offsetof(struct sv, sv_u)",
    "xcv_stash": "offsetof(XPVCV, xcv_stash)",
    "xcv_gv": "offsetof(XPVCV, xcv_gv_u)",
    "xcv_flags": "offsetof(XPVCV, xcv_flags)",
    "xgv_name_hek": "offsetof(XPVGV, xiv_u)",
    "xgv_stash": "offsetof(XPVGV, xnv_u)",
    "xhv_max": "offsetof(XPVHV, xhv_max)",
    "hv_aux_offset": "offsetof(struct xpvhv_with_aux, xhv_aux)",
    "aux_name": "offsetof(struct xpvhv_aux, xhv_name_u)",
    "aux_name_count": "offsetof(struct xpvhv_aux, xhv_name_count)",
    "hek_len": "offsetof(struct hek, hek_len)",
    "hek_key": "offsetof(struct hek, hek_key)",
}
CONSTANTS = {"CVf_NAMED": CVF_NAMED, "SVt_PVCV": SVT_PVCV, "SVt_PVGV": SVT_PVGV, "SVt_PVHV": SVT_PVHV,
             "SVf_OOK": SVF_OOK, "CXt_SUB": CXT_SUB, "CXt_FORMAT": CXT_FORMAT, "CXt_EVAL": CXT_EVAL,
             "CXTYPEMASK": CXTYPEMASK, "sizeof(((struct block *)0)->blku_type)": 1,
             "offsetof(struct block, blk_u.blku_eval.retop)": offsets_for((5, 36)).cx_retop}


# Debian's perls 5.32, 5.36, 5.40, 5.42, and experimental's 5.44 (in a root of its own)
SUITES = ("bullseye", "bookworm", "trixie", "sid", "experimental-perl")


@pytest.mark.parametrize("where", ("host",) + SUITES)
def test_table_matches_each_perls_headers(tmp_path, where):
    """The table's offsets of each perl, against offsetof() compiled with that perl's own headers
    and compiler flags: this machine's, and each Debian release's (a root filesystem of
    .ci/install.d/rootfs.sh, its perl asked for its Config in a chroot)."""
    cc = require_tool("cc")
    root = Path("/") if where == "host" else extracted(where)
    perl = [require_tool("perl")] if where == "host" else ["chroot", str(root), "perl"]
    config = subprocess.run([*perl, "-MConfig", "-e", 'print join " ", $Config{archlibexp}, $Config{ccflags}, '
                             '$Config{PERL_REVISION}, $Config{PERL_VERSION}, $Config{useithreads} // ""'],
                            capture_output=True, text=True, check=True).stdout.split()
    archlib, ccflags, version, threads = config[0], config[1:-3], (int(config[-3]), int(config[-2])), config[-1]
    archlib = str(root) + archlib if where != "host" else archlib
    if threads != "define":
        pytest.skip("this perl is not threaded (the table is for ithreads builds)")
    offsets = offsets_for(version)
    assert offsets is not None, f"no offsets for perl {version}"
    expressions = dict(EXPRESSIONS)
    if not offsets.hv_aux_in_body:
        expressions.pop("hv_aux_offset")
    checks = {**expressions, **{expr: expr for expr in CONSTANTS}}
    source = tmp_path / "offsets.c"
    source.write_text("#include <EXTERN.h>\n#include <perl.h>\n#include <stdio.h>\n#include <stddef.h>\n"
                      "int main(void) {\n" + "".join(f'    printf("%s %ld\\n", "{name}", (long)({expr}));\n'
                                                        for name, expr in checks.items()) + "    return 0;\n}\n")
    binary = tmp_path / "offsets"
    # (5.40+ headers define inline functions that call into libperl: never called here, left unresolved)
    built = subprocess.run([cc, *ccflags, f"-I{archlib}/CORE", str(source), "-o", str(binary), "-no-pie",
                            "-Wl,--unresolved-symbols=ignore-all"],
                           capture_output=True, text=True)
    if built.returncode != 0 and "perl.h" in built.stderr and "No such file" in built.stderr:
        pytest.fail(f"perl's headers are missing ({archlib}/CORE): install perl's development files",
                    pytrace=False)
    assert built.returncode == 0, built.stderr[-2000:]
    found = dict(line.rsplit(" ", 1) for line in subprocess.run([str(binary)], capture_output=True, text=True,
                                                                 check=True).stdout.splitlines())
    table = {f.name: getattr(offsets, f.name) for f in fields(offsets)}
    wrong = {name: (table[name], int(found[name])) for name in expressions if table[name] != int(found[name])}
    wrong.update({expr: (want, int(found[expr])) for expr, want in CONSTANTS.items() if want != int(found[expr])})
    assert not wrong, f"perl {version}: (table, headers) {wrong}"
