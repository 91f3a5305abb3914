"""Ruby's struct offsets per version (x86-64), for the walker and the userspace reader.

Ruby publishes no introspection data, so these come from its headers per release line (checked
against a live 3.1 by tests/runtimes/ruby: the frames read here equal Ruby's own backtrace; 3.3 and
3.4, with their class names, against Debian 13's ruby and Debian experimental's ruby3.4 by
test_ruby_classes and the runtime matrix).
Only what the kernel walker (bpf/ruby.h) and the symbolizer (iseq.py) read is listed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RubyOffsets:
    version: tuple[int, int]
    # rb_execution_context_t
    ec_vm_stack: int = 0
    ec_vm_stack_size: int = 8
    ec_cfp: int = 16
    cf_size: int = 56                # rb_control_frame_t: pc 0, sp 8, iseq 16, self 24, ep 32, ...
    running_ec: int = 0              # rb_ractor_t.threads.running_ec (3.0 without TLS)
    # rb_iseq_t -> rb_iseq_constant_body
    iseq_body: int = 16
    body_type: int = 0
    body_size: int = 4               # iseq_size (VALUEs)
    body_encoded: int = 8            # iseq_encoded
    body_location: int = 64          # location: pathobj, base_label, label, first_lineno
    insn_info_body: int = 120
    insn_info_size: int = 136
    succ_index_table: int = 144
    local_iseq: int = 176
    insn_info_entry: int = 12        # sizeof(struct iseq_insn_info_entry); line_no at 0
    # strings and arrays
    rstring_embed_len_in_flags: bool = True   # <= 3.1: embedded length in flags bits 14..18
    rstring_ary: int = 16
    # method entries (rb_callable_method_entry_t) and definitions
    me_defined_class: int = 8
    me_def: int = 16
    me_owner: int = 32
    def_original_id: int = 32
    last_op_id: int = 169            # tLAST_OP_ID: IDs above it carry a scope in their low bits
    # classes (classes.py), up to 3.1: RClass.ptr -> rb_classext_t.iv_tbl (an st_table of the class's
    # instance variables, __classpath__ and __attached__ among them); 0: not this layout
    class_ext: int = 24
    ext_iv_tbl: int = 8
    # 3.3+: rb_classext_t lies in the class's own slot after struct RClass (basic, super, m_tbl: 32
    # bytes); from the class: classext.classpath, the byte of its permanent_classpath bit (bit 0) and
    # as.singleton_class.attached_object; 0: not this layout
    classpath: int = 0
    classpath_flags: int = 0
    attached_object: int = 0
    fl_singleton: int = 1 << 12      # RUBY_FL_SINGLETON: FL_USER0 up to 3.3, FL_USER1 from 3.4


_V31 = RubyOffsets((3, 1), cf_size=64, running_ec=0x208)
_TABLE: dict[tuple[int, int], RubyOffsets] = {
    (2, 7): replace(_V31, version=(2, 7), cf_size=56, insn_info_entry=8, last_op_id=168),
    (3, 0): replace(_V31, version=(3, 0), cf_size=56, insn_info_entry=8, last_op_id=168),
    (3, 1): _V31,
    (3, 2): replace(_V31, version=(3, 2), insn_info_body=112, insn_info_size=128, succ_index_table=136,
                    local_iseq=168, rstring_embed_len_in_flags=False, rstring_ary=24, class_ext=0),
}
_TABLE[(3, 3)] = replace(_TABLE[(3, 2)], version=(3, 3), cf_size=56, running_ec=0x180, classpath=32 + 120,
                         classpath_flags=32 + 117, attached_object=32 + 96)
# 3.4: tLAST_OP_ID one more (idIncludeP), RUBY_FL_SINGLETON moved to FL_USER1; classext as in 3.3
_TABLE[(3, 4)] = replace(_TABLE[(3, 3)], version=(3, 4), last_op_id=170, fl_singleton=1 << 13)

SUPPORTED = tuple(sorted(_TABLE))
TESTED = ((3, 1),)


def offsets_for(version: tuple[int, int]) -> RubyOffsets | None:
    return _TABLE.get(version)
