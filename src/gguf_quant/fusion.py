"""Sibling projections that read one input (an attention's q/k/v, an MLP's gate/up) run as one
packed matmul over their rows stacked: one launch where the model makes two or three calls.

ggml rows are independent (a row's blocks hold everything its dot product needs), so stacking the
members' packed weights along N is exact. Each member keeps its own `weight` parameter, now a view
of its rows in the group's buffer, so the state dict, `save_pretrained` and `save_gguf` see the
same tensors as before and no memory is added. The first member called with an input computes every
member's output and leaves each sibling its part; a sibling called with that same tensor (by
identity) takes it, and one called with any other input computes afresh, so an unusual call order
or a cross-attention input costs time, never a wrong result.
"""
from __future__ import annotations

import copy
import logging
from itertools import accumulate

import torch
from torch import Tensor, nn

from . import ops
from .modules import GgufLinear

__all__ = ["RowGroup", "SIBLINGS", "fuse_siblings", "unshared_state_dict"]

logger = logging.getLogger("gguf_quant")

# Child names that transformers' decoder layers call on one tensor (any of them may come first).
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
# the input tensor's attribute that holds the siblings' products not yet taken:
# {group: (the tensor's version then, [each member's product, None once taken])}
_HELD = "_gguf_quant_siblings"


class RowGroup:
    """Packed linears of one type and input width whose weights are views of one buffer."""

    def __init__(self, members: list[GgufLinear], names: list[str], cpu: bool = False):
        self.members, self.names, self.cpu = members, names, cpu
        self.qtype = members[0].qtype
        self.in_features = members[0].in_features
        ends = list(accumulate(m.out_features for m in members))
        self.spans = list(zip([0, *ends[:-1]], ends))
        self.fused: Tensor | None = None
        for slot, m in enumerate(members):
            m.group, m.group_slot = self, slot
        self.stack()

    def stack(self) -> None:
        """Copy the members' rows into one buffer and point each member's weight at its rows;
        left unstacked (each member on its own) while they are not all on one device, or are on
        the CPU without `cpu`: there a load keeps the blocks in the file's mapping, which a copy
        would give up for a launch count that matters little to the CPU."""
        self.fused = None
        devices = {m.weight.device for m in self.members}
        kind = devices.pop().type if len(devices) == 1 else "several"
        if kind in ("several", "meta") or (kind == "cpu" and not self.cpu):
            return
        fused = torch.cat([m.weight.detach() for m in self.members])
        for m, (a, b) in zip(self.members, self.spans):
            m.weight.data = fused[a:b]
        self.fused = fused

    def _holds(self, member: GgufLinear) -> bool:
        a, _ = self.spans[member.group_slot]
        w, f = member.weight, self.fused
        return w.device == f.device and w.data_ptr() == f.data_ptr() + a * f.stride(0)

    def refresh(self, member: GgufLinear) -> None:
        """After `member`'s weight may have changed: `module._apply` (`.to()`, `.cuda()`, casts)
        visits the members one by one and a move copies each weight on its own, so the buffer is
        dropped, and built again once every member is on one device; a cast leaves uint8 blocks
        as they are, and the buffer with them. `load_state_dict` copies into the members' rows,
        or with `assign=True` replaces the weights, which are then stacked again."""
        if self.fused is None or not self._holds(member):
            self.stack()

    def __deepcopy__(self, memo) -> "RowGroup":
        # Parameters deep-copy as clones, each on its own, so the copy's members hold separate
        # weights: its group starts unstacked, and any `.to()` of the copy stacks it again.
        twin = copy.copy(self)
        memo[id(self)] = twin
        twin.members, twin.names = copy.deepcopy(self.members, memo), list(self.names)
        twin.fused = None
        return twin

    def output(self, slot: int, x: Tensor) -> Tensor:
        """Member `slot`'s product for `x` (`[rows, its out_features]`, no bias): left on `x` by a
        sibling's call on this very tensor, unchanged since, or computed here with every sibling's,
        which are left on `x` for them. Held on the input tensor, not here: they go when it does,
        and under `torch.compile` they stay inside the graph, with no state of this group to guard
        or to write back after each call."""
        # in-place writes bump a tensor's version (inference-mode tensors keep none)
        version = None if torch.compiler.is_compiling() or x.is_inference() else x._version
        held = getattr(x, _HELD, None)
        entry = None if held is None else held.get(self)
        if entry is None or entry[0] != version or entry[1][slot] is None:
            entry = (version, self._compute(slot, x))
            if held is None:
                held = {}
                setattr(x, _HELD, held)
            held[self] = entry
        outs = entry[1]
        out, outs[slot] = outs[slot], None
        if all(o is None for o in outs):
            del held[self]
        return out

    def _compute(self, slot: int, x: Tensor) -> list[Tensor | None]:
        if not torch.compiler.is_compiling() and not all(self._holds(m) for m in self.members):
            # a member's weight was replaced (`load_state_dict(assign=True)`, `.data =`): stack its rows as they are now
            self.stack()
            if self.fused is None:
                return [self.members[slot].product(x) if i == slot else None for i in range(len(self.members))]
        y = ops.run_matmul(x.reshape(-1, self.in_features), self.fused, self.qtype)
        return [y[:, a:b] for a, b in self.spans]


def _fusable(members: list[GgufLinear]) -> bool:
    # (fuse_siblings passes members of one type and input width) an accelerate hook may offload or move a
    # weight on its own at each call
    return all(m.group is None and getattr(m, "_hf_hook", None) is None for m in members)


def fuse_siblings(model: nn.Module, cpu: bool = False) -> list[RowGroup]:
    """Group the `SIBLINGS` children of each module that share a ggml type and input width
    (q/k/v all of one type: the three; q and k alike but v not, as in llama.cpp's Q4_K_M: q/k),
    stacked wherever they sit on one accelerator (with `cpu`, on the CPU too)."""
    groups = []
    for module in model.modules():
        for names in SIBLINGS:
            alike: dict[tuple[int, int], list[str]] = {}
            for n in names:
                m = getattr(module, n, None)
                if type(m) is GgufLinear:
                    alike.setdefault((m.qtype, m.in_features), []).append(n)
            for run in alike.values():
                members = [getattr(module, n) for n in run]
                if len(run) > 1 and _fusable(members):
                    groups.append(RowGroup(members, run, cpu))
    stacked = [g for g in groups if g.fused is not None]
    if any(g.fused.is_cuda for g in stacked):
        # the members' separate blocks, freed as each group stacked, go back to the device
        torch.cuda.empty_cache()
    if stacked:
        kinds = ", ".join(sorted({"/".join(g.names) for g in stacked}))
        logger.info(f"gguf_quant: {len(stacked)} groups of sibling projections run as one matmul each ({kinds})")
    return groups


def unshared_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The state dict with each stacked weight copied to the host: its rows share the group's
    buffer, which transformers' `save_pretrained` would otherwise clone on the device."""
    state = model.state_dict()
    for name, t in state.items():
        if name.endswith(".weight") and t.device.type != "cpu":
            module = model.get_submodule(name[: -len(".weight")])
            group = getattr(module, "group", None)
            if group is not None and group.fused is not None:
                state[name] = t.cpu()
    return state
