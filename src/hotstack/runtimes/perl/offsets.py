"""Where Perl 5.30-5.44 keep what the walker and the namer read (x86-64).

Debian ships no debug information for perl, so the offsets are a table. Each entry was computed by
compiling offsetof() against that release's headers (perl5's git tags) with Debian's 5.36
config.h (ithreads, MULTIPLICITY); tests/runtimes/perl/test_perl_offsets.py checks the entries of
Debian's perls (5.32, 5.36, 5.40, 5.42, and experimental's 5.44) against each one's own headers and compiler flags.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class PerlOffsets:
    version: tuple[int, int]
    # struct interpreter (intrpvar.h): PL_curcop, PL_curstackinfo
    interp_curcop: int = 208
    interp_curstackinfo: int = 224
    # struct stackinfo
    si_cxstack: int = 8
    si_prev: int = 16
    si_cxix: int = 32
    # PERL_CONTEXT (struct block): cx_type is byte 0
    cx_size: int = 104
    cx_oldcop: int = 16
    cx_sub_cv: int = 72
    cx_retop: int = 48          # blk_sub.retop and blk_eval.retop
    # COP
    cop_line: int = 36
    cop_file: int = 48          # char * (ithreads); else cop_filegv, a GV named "_<file"
    # SV heads and bodies
    sv_any: int = 0
    sv_flags: int = 12
    sv_u: int = 16
    xcv_stash: int = 32
    xcv_gv: int = 56            # GV *, or HEK * when CVf_NAMED (lexical subs)
    xcv_flags: int = 92
    xgv_name_hek: int = 32      # xiv_u.xivu_namehek
    xgv_stash: int = 40         # xnv_u.xgv_stash
    xhv_max: int = 24
    hv_aux_in_body: bool = True     # 5.36+: struct xpvhv_with_aux; before: after HvARRAY's buckets
    hv_aux_offset: int = 32         # offset of xhv_aux in the body (5.36+)
    aux_name: int = 0
    aux_name_count: int = 28
    hek_len: int = 4
    hek_key: int = 8


CVF_NAMED = 0x8000
SVT_MASK = 0xFF
SVT_PVGV, SVT_PVHV, SVT_PVCV = 9, 12, 13

_V536 = PerlOffsets((5, 36))
_TABLE = {
    (5, 30): replace(_V536, version=(5, 30), interp_curcop=224, interp_curstackinfo=240, cx_size=96,
                     cx_sub_cv=64, hv_aux_in_body=False),
    (5, 32): replace(_V536, version=(5, 32), interp_curcop=224, interp_curstackinfo=240, hv_aux_in_body=False),
    (5, 34): replace(_V536, version=(5, 34), hv_aux_in_body=False),
    (5, 36): _V536,
    (5, 38): replace(_V536, version=(5, 38)),
    (5, 40): replace(_V536, version=(5, 40)),
    (5, 42): replace(_V536, version=(5, 42)),
    (5, 44): replace(_V536, version=(5, 44)),
}
TESTED = ((5, 36),)


def offsets_for(version: tuple[int, int]) -> PerlOffsets | None:
    return _TABLE.get(version)
