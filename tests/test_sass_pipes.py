"""benchmarks/sass_pipes.py's reading of nvdisasm's output (NOTES.md session 63), on a kernel disassembled by
NVIDIA's nvdisasm (tests/data/saxpy_loop_sm90a.sass, its source in the file's header), counted here by hand."""
import collections
import re

from script_module import ROOT, load_script


def load_tool():
    return load_script(ROOT / "benchmarks" / "sass_pipes.py")


def test_stage_loop_by_pipe():
    """The stage loop is the range from label .L_x_3 to its backward branch (16 instructions), not the longer
    straight code around it nor the one-instruction trap loop `.L_x_4: BRA .L_x_4` at the end; by pipe: 8 ALU
    (2 MOV, 2 IADD3, IADD3.X, ISETP, SHF, LOP3), 5 FMA (2 IMAD.MOV, VIADD, IMAD.X, FFMA), 3 other (2 LDG, BRA);
    the I2FP after the loop is not in it."""
    tool = load_tool()
    sass = (ROOT / "tests" / "data" / "saxpy_loop_sm90a.sass").read_text()
    kernels = tool.kernels(sass)
    assert list(kernels) == ["_Z10saxpy_loopPKfPfPKji"]
    loop = tool.stage_loop(kernels["_Z10saxpy_loopPKfPfPKji"])
    ops = [tool.opcode(t) for t in loop]
    assert len(ops) == 16
    assert ops[0] == "IMAD.MOV.U32" and ops[-1] == "BRA"
    assert collections.Counter(tool.pipe(o) for o in ops) == {"ALU": 8, "FMA": 5, "other": 3}


def test_stage_loop_holds_the_mma():
    """Where code placed after the stage loop branches back above it (a shuffle's out-of-line path into the
    records loop before it), the range of that branch is longer but the stage loop is the shortest one that holds
    every mma."""
    tool = load_tool()
    body = [("L", ".L_x_1"), ("I", "FMNMX R1, R1, R2, !PT"), ("I", "STS.128 [R3], R4"),
            ("L", ".L_x_2"), ("I", "IMMA.16832.U8.S8 R8, R12, R16, R8"), ("I", "IMAD R9, R8, R10, R9"),
            ("I", "@!P1 BRA `(.L_x_2)"), ("I", "EXIT"),
            ("I", "SHFL.BFLY P2, R2, R1, R5, R6"), ("I", "BRA `(.L_x_1)")]
    ops = [tool.opcode(t) for t in tool.stage_loop(body)]
    assert ops == ["IMMA.16832.U8.S8", "IMAD", "BRA"]


def test_stage_loop_of_two_mma_loops():
    """Two stage loops (the tile kernel's for a quarter and for all of its token groups) and a wait's out-of-line
    retry that branches back above both: the retry's range holds the most mma (1 + 2), but it holds the two loops,
    so the stage loop is the inner one with the most mma (2)."""
    tool = load_tool()
    body = [("L", ".L_x_1"), ("I", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R2+URZ], R3"),
            ("L", ".L_x_2"), ("I", "HMMA.16816.F32.BF16 R8, R12, R16, R8"), ("I", "@P1 BRA `(.L_x_2)"),
            ("L", ".L_x_3"), ("I", "HMMA.16816.F32.BF16 R8, R12, R16, R8"),
            ("I", "HMMA.16816.F32.BF16 R4, R12, R18, R4"), ("I", "@P2 BRA `(.L_x_3)"), ("I", "EXIT"),
            ("I", "@!P0 BRA `(.L_x_1)")]
    ops = [tool.opcode(t) for t in tool.stage_loop(body)]
    assert ops == ["HMMA.16816.F32.BF16", "HMMA.16816.F32.BF16", "BRA"]


def test_pipe_names():
    """Opcodes with their modifiers, as nvdisasm prints them (a predicate stripped first)."""
    tool = load_tool()
    assert tool.opcode("@!P0 BRA `(.L_x_3)") == "BRA"
    assert tool.opcode("@P1 LDGSTS.E.BYPASS.128 [R17+-0x1100], desc[UR8][R12.64]") == "LDGSTS.E.BYPASS.128"
    cases = {"PRMT": "ALU", "SHF.R.U32.HI": "ALU", "ISETP.NE.AND": "ALU", "IMAD.HI.U32": "FMA", "HADD2.F32": "FMA",
             "I2FP.F32.S32": "CONV", "I2F.S8": "CONV", "HMMA.16816.F32": "MMA", "IMMA.16832.U8.S8": "MMA",
             "LDS.128": "LDS", "LDGSTS.E.BYPASS.128": "other"}
    assert {op: tool.pipe(op) for op in cases} == cases


def test_same_code_across_label_numbering():
    """nvdisasm numbers labels over the whole cubin, so an unchanged kernel placed after a changed one comes back with
    its labels shifted: that is the same code; one changed operand, or one label pointing elsewhere, is not."""
    tool = load_tool()
    sass = (ROOT / "tests" / "data" / "saxpy_loop_sm90a.sass").read_text()
    body = tool.kernels(sass)["_Z10saxpy_loopPKfPfPKji"]
    shift = lambda text: re.sub(r"\.L_x_(\d+)", lambda m: f".L_x_{int(m.group(1)) + 7}", text)  # noqa: E731
    shifted = [(kind, shift(text)) for kind, text in body]
    assert shifted != body and tool.same_code(body, shifted)
    i = next(i for i, (kind, text) in enumerate(body) if kind == "I" and text.startswith("FFMA"))
    operand = body[:i] + [("I", body[i][1].replace("R", "R1", 1))] + body[i + 1:]
    assert not tool.same_code(body, operand)
    j = next(i for i, (kind, text) in enumerate(body) if "BRA `(.L_x_3)" in text)
    target = body[:j] + [("I", body[j][1].replace(".L_x_3", ".L_x_2"))] + body[j + 1:]
    assert not tool.same_code(body, target)
