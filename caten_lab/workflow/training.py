"""The training workflow, exported: ``export_training(trainer, dir)`` -> lib<name>.so + <name>.h + a CLI.

The library holds one training step of a :class:`~caten_lab.models.trainer.Trainer` as the Python Trainer
runs it, with no Python left: the data loader action (``fill_batch``, workflow/train_actions.py: the
Trainer's windows, read from a memory-mapped uint16/uint32 token file), the compiled step program (the
same ``Trainer.step_graph()`` and compiler, so the same kernels: forward, backward, clipping, AdamW) and
fixed C (c/train.c) that loads the initial weights, computes each step's learning rate and AdamW scalars
with the formulas of nn/optim.py, runs the step and writes Hugging Face checkpoints. So N steps of the
CLI give the checkpoint N steps of ``Trainer.train()`` give, from the same weights, tokens and seed.

    trainer = Trainer(GPT2(config, use_cache=False), TrainingArguments(batch=16, block=128), tokens)
    out = export_training(trainer, "build/train")        # build/train/{libtrain.so, train.h, train, init/}
    subprocess.run([out.cli, "--init", out.directory / "init", "--data", "tokens.bin", "--steps", "1000",
                    "--out", "run"])                      # run/{config.json, model.safetensors}

The model's buffers are data (tables linked with .incbin, as the other workflows' model tables): each
program buffer's role, size and memory-plan slot, the buffer a state output updates, every weight's Hugging
Face name and file layout, the optimizer groups' weight decay and betas, and the config.json text.
"""

from __future__ import annotations

import ctypes
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from caten_lab.air.shapes import numel
from caten_lab.compiler import compile as compile_graph
from caten_lab.models.gpt2_weights import TRANSPOSED_WEIGHTS, expected_shapes, hf_config, save_hf_dir
from caten_lab.nn.optim import AdamW
from caten_lab.workflow.c_library import Exported, build, c_file, fill, rules_header
from caten_lab.workflow.cgen import render_c
from caten_lab.workflow.model_tables import ExportError, check_c_call
from caten_lab.workflow.tokenizers.static_data import incbin_c, pack_static
from caten_lab.workflow.train_actions import fill_batch

ROLE_CODES = {"weight": 0, "zero": 1, "tokens": 2, "hyper": 3, "slot": 4, "loss": 5, "update": 6}  # TB_* of c/train.c
SCHEDULE_CODES = {"constant": 0, "linear": 1, "cosine": 2}
# a weight's record (tt_weight of c/train.c): buffer, name offset, ndim, file shape[2], transposed


def export_training(trainer: Any, directory: str | os.PathLike, *, name: str = "train") -> Exported:
    """Write ``lib<name>.so``, ``<name>.h``, the ``<name>`` CLI and ``init/`` (the trainer's model now, as a
    Hugging Face directory: the CLI's ``--init``) into ``directory``. The step is compiled for the trainer's
    batch and block; its optimizer must be the Trainer's AdamW."""
    t0 = time.perf_counter()
    if not name.isidentifier():
        raise ExportError(f"workflow name {name!r} must be a C identifier")
    if not isinstance(getattr(trainer, "optimizer", None), AdamW):
        raise ExportError("export_training takes a Trainer (models/trainer.py) whose optimizer is AdamW",
                          hint="Trainer(GPT2(config, use_cache=False), TrainingArguments(...), tokens)")
    config_json = json.dumps(hf_config(trainer.model.config, "export_training"), indent=2) + "\n"
    step = trainer.step_graph()
    prog = compile_graph(step.graph, backend="c")
    out = Path(directory).resolve()
    (out / "src").mkdir(parents=True, exist_ok=True)
    tables = step_tables(trainer, step, prog)
    tables["config"] = np.frombuffer(config_json.encode(), np.uint8)
    blob = pack_static(tables)
    loader = render_c(fill_batch)
    check_c_call(fill_batch, loader.entry)
    values = {"P": name, "U": name.upper(), "MODEL": f"GPT-2 ({trainer.model.config.n_layer} layers, width "
                                                      f"{trainer.model.config.n_embd})"}
    includes: dict[str, str | bytes] = {f: fill(c_file(f), values) for f in (
        "export_head.c", "rules_table.c", "json_reader.c", "st_loader.c", "weight_read.c", "train.c")}
    includes["rules.h"] = rules_header()
    includes["train_tables.bin"] = blob.data
    includes["train_data.h"] = incbin_c(blob, out / "src" / "train_tables.bin", "ct_t")
    includes["actions.h"] = loader.cdef + "\n"
    units = {"step": prog.c_source, "data_loader": loader.source,
             f"{name}_workflow": fill(c_file("workflow_train.c"), values)}
    gen_s = time.perf_counter() - t0
    res = build(out, name, units, fill(c_file("train_main.c"), values), fill(c_file("train.h"), values), includes)
    save_hf_dir(trainer.model, out / "init")
    res.timings["generate_c"] = gen_s
    return res


def step_tables(trainer: Any, step: Any, prog: Any) -> dict[str, object]:
    """The tables c/train.c reads: what each buffer of the compiled step is and where its data comes from."""
    sched = prog.schedule
    if sched is None or prog.c_source is None:
        raise ExportError("the training step was not compiled with the C backend")
    if sched.symbols:
        raise ExportError(f"the training step has symbols {list(sched.symbols)}; export needs fixed shapes")
    names = list(sched.buffers)
    index = {n: b for b, n in enumerate(names)}
    params = dict(trainer.model.named_parameters())
    hf = expected_shapes(trainer.model.config)
    moments = {name for name, buf in step.states.items() if name not in params}
    updates = {sched.outputs[i]: dst for i, dst in prog.state_writes.items()}
    plan = prog.memory_plan
    slot_of = dict(plan.slot_of) if plan is not None else {}
    n_slots = len(plan.slots) if plan is not None else 0
    slot_bytes = list(plan.slot_bytes({})) if plan is not None else []
    roles, nbytes, slots, dst, weights, text = [], [], [], [], [], bytearray()
    for b, bname in enumerate(names):
        info = sched.buffers[bname]
        size = int(numel(tuple(info.shape))) * np.dtype(info.dtype.np).itemsize
        slot, target = slot_of.get(bname, -1), -1
        if info.kind == "intermediate":
            role = "slot"
            if slot < 0:  # an intermediate the plan left out: a slot of its own
                slot, n_slots = n_slots, n_slots + 1
                slot_bytes.append(size)
        elif bname in updates:
            role, target = "update", index[updates[bname]]
        elif info.kind == "output":
            if bname != sched.outputs[0]:
                raise ExportError(f"step output {bname!r} is neither the loss nor a state update")
            role = "loss"
        elif bname == "tokens":
            role = "tokens"
        elif bname == trainer.hyper_name:
            role = "hyper"
            if tuple(info.shape) != (len(trainer.optimizer.param_groups), 3):
                raise ExportError(f"optimizer scalars of shape {tuple(info.shape)}: the exported C computes "
                                  "AdamW's three per group")
        elif bname in moments:
            role = "zero"
        elif bname in params:
            role = "weight"
            weights.append(weight_record(b, bname, tuple(info.shape), hf, len(text)))
            text += bname.encode() + b"\0"
        else:
            raise ExportError(f"step input {bname!r} is not a parameter, moment, the tokens or the optimizer's scalars")
        roles.append(ROLE_CODES[role])
        nbytes.append(size)
        slots.append(slot if role == "slot" else -1)
        dst.append(target)
    missing = sorted(set(hf) - {names[w[0]] for w in weights})
    if missing:
        raise ExportError(f"the step does not read the weights {missing[:3]}", hint="every parameter needs a gradient")
    a, groups = trainer.args, trainer.optimizer.param_groups
    return {
        "role": np.asarray(roles, np.int64), "bytes": np.asarray(nbytes, np.int64), "slot": np.asarray(slots, np.int64),
        "dst": np.asarray(dst, np.int64), "slot_bytes": np.asarray(slot_bytes or [0], np.int64),
        "weights": np.asarray(weights, np.int64).reshape(-1), "names": np.frombuffer(bytes(text), np.uint8),
        "groups": np.asarray([[g["weight_decay"], *g["betas"]] for g in groups], np.float64).reshape(-1),
        "nbuf": len(names), "nslot": n_slots, "nweights": len(weights), "ngroups": len(groups),
        "tokens_buf": index["tokens"], "hyper_buf": index[trainer.hyper_name], "loss_buf": index[sched.outputs[0]],
        "batch": a.batch, "block": a.block, "vocab": trainer.model.config.vocab_size, "steps": a.steps,
        "lr": float(a.lr), "warmup": -1 if a.warmup is None else int(a.warmup), "min_lr_ratio": float(a.min_lr_ratio),
        "schedule": SCHEDULE_CODES[a.schedule], "seed": int(a.seed),
    }


def weight_record(b: int, name: str, shape: tuple[int, ...], hf: dict[str, tuple[int, ...]], at: int) -> list[int]:
    """One ``tt_weight`` record: the buffer, its name's offset, the HF file shape and whether it is transposed."""
    if name not in hf:
        raise ExportError(f"parameter {name!r} is not a GPT-2 weight", hint="export_training trains GPT2 models")
    file_shape = hf[name]
    transpose = name.endswith(TRANSPOSED_WEIGHTS)
    if (tuple(reversed(file_shape)) if transpose else file_shape) != shape:
        raise ExportError(f"parameter {name!r} has shape {shape}; the checkpoint layout needs {file_shape}")
    return [b, at, len(file_shape), file_shape[0], file_shape[1] if len(file_shape) > 1 else 0, int(transpose)]


class TrainOptions(ctypes.Structure):
    """The ``<name>_options`` struct of c/train.h (what a run may change without recompiling)."""

    _fields_ = [("steps", ctypes.c_int64), ("lr", ctypes.c_double), ("warmup", ctypes.c_int64),
                ("min_lr_ratio", ctypes.c_double), ("schedule", ctypes.c_int), ("seed", ctypes.c_int64),
                ("threads", ctypes.c_int)]


class ExportedTrainer:
    """An exported training library driven from Python through its C API (ctypes), as the CLI drives it
    from C: for tests and benchmarks that time or check the library itself.

        lib = ExportedTrainer(out.library, out.directory / "init", "tokens.bin")
        losses = [lib.step() for _ in range(lib.options.steps)]
        lib.save("run")
    """

    def __init__(self, library: str | os.PathLike, weights: str | os.PathLike, tokens: str | os.PathLike,
                 *, token_bytes: int = 2, name: str = "train") -> None:
        self.lib, self.name = ctypes.CDLL(str(library)), name
        fn = self._fn
        fn("open", ctypes.c_void_p, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)])
        fn("last_error", ctypes.c_char_p, [ctypes.c_void_p])
        fn("set_data", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int])
        fn("step", ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(TrainOptions), ctypes.POINTER(ctypes.c_double)])
        fn("save", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p])
        fn("lr_at", ctypes.c_double, [ctypes.POINTER(TrainOptions), ctypes.c_int64])
        fn("default_options", None, [ctypes.POINTER(TrainOptions)])
        fn("free", None, [ctypes.c_void_p])
        self.options = TrainOptions()
        self.call("default_options", ctypes.byref(self.options))
        err = ctypes.c_int(0)
        self.handle = self.call("open", os.fsencode(weights), ctypes.byref(err))
        if not self.handle:
            raise ExportError(f"{name}_open: {self.call('last_error', None).decode()}")
        self._check(self.call("set_data", self.handle, os.fsencode(tokens), token_bytes), "set_data")

    def _fn(self, what: str, restype: Any, argtypes: list) -> None:
        f = getattr(self.lib, f"{self.name}_{what}")
        f.restype, f.argtypes = restype, argtypes

    def call(self, what: str, *args: Any) -> Any:
        return getattr(self.lib, f"{self.name}_{what}")(*args)

    def _check(self, rc: int, what: str) -> None:
        if rc:
            raise ExportError(f"{self.name}_{what}: {self.call('last_error', self.handle).decode()}")

    def step(self) -> float:
        """One training step under :attr:`options`; its loss."""
        loss = ctypes.c_double(0.0)
        self._check(self.call("step", self.handle, ctypes.byref(self.options), ctypes.byref(loss)), "step")
        return loss.value

    def lr_at(self, step: int) -> float:
        return float(self.call("lr_at", ctypes.byref(self.options), step))

    def save(self, directory: str | os.PathLike) -> None:
        self._check(self.call("save", self.handle, os.fsencode(directory)), "save")

    def close(self) -> None:
        if self.handle:
            self.call("free", self.handle)
            self.handle = None
