#!/usr/bin/env python3
"""Export a PyTorch nn.Module to the fsdp-model/1 format read by fsdp-plan (tools/README.md).

Only the structure is written: class names with their ancestors (`bases`, from the MRO, nearest
first, ending at "Module"), parameter and buffer shapes, dtypes and requires_grad, and ids for
modules and parameters that occur in more than one slot (shared modules, tied weights). No values
are read, so a model built on the meta device exports without memory.

As a library:
    from export_torch_model import export_model, write_model
    write_model(model, "model.json")

From the command line (the expression is evaluated with torch and torch.nn imported; modules
given with --import are imported first):
    python3 tools/export_torch_model.py "torch.nn.Transformer(d_model=64)" -o transformer.json
    python3 tools/export_torch_model.py --import mypkg.models "mypkg.models.build()" -o m.json

Works with torch 1.13 (Debian's python3-torch) and newer. With torch >= 2.0 the expression is
evaluated under `with torch.device("meta")`, so even a 70B-parameter model exports in seconds.
"""
import argparse
import contextlib
import importlib
import json
import sys

FORMAT = "fsdp-model/1"


def class_bases(cls):
    """Ancestor class names, nearest first, ending at Module (without object)."""
    import torch.nn as nn

    out = []
    for k in cls.__mro__[1:]:
        if k is object:
            continue
        out.append(k.__name__)
        if k is nn.Module:
            break
    return out


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def hyperparameters(m):
    """What parameter shapes do not show and fsdp-plan's activation estimate needs."""
    import torch.nn as nn
    if isinstance(m, nn.MultiheadAttention):
        return {"num_heads": int(m.num_heads), "dropout": float(m.dropout)}
    if isinstance(m, nn.modules.dropout._DropoutNd):
        return {"p": float(m.p)}
    if isinstance(m, nn.TransformerEncoderLayer):
        # torch keeps the activation as a function; 2 marks GELU in its fast-path flag.
        gelu = getattr(m, "activation_relu_or_gelu", 0) == 2 or \
            getattr(m.activation, "__name__", "") == "gelu" or isinstance(m.activation, nn.GELU)
        return {"activation": "gelu" if gelu else "relu", "norm_first": bool(m.norm_first)}
    return {}


def export_model(model):
    """Return the fsdp-model/1 document (a dict) for `model`."""
    import torch.nn as nn

    # Count the slots each module and parameter occupies, to give ids only to shared ones.
    module_slots, param_slots = {}, {}
    stack, seen = [model], set()
    module_slots[id(model)] = 1
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        for p in m._parameters.values():
            if p is not None:
                param_slots[id(p)] = param_slots.get(id(p), 0) + 1
        for c in m._modules.values():
            if c is not None:
                module_slots[id(c)] = module_slots.get(id(c), 0) + 1
                stack.append(c)

    module_ids, param_ids = {}, {}

    def module_id(m):
        if id(m) not in module_ids:
            module_ids[id(m)] = f"m{len(module_ids)}"
        return module_ids[id(m)]

    def param_id(p):
        if id(p) not in param_ids:
            param_ids[id(p)] = f"p{len(param_ids)}"
        return param_ids[id(p)]

    defined_modules, defined_params = set(), set()

    def describe(m):
        d = {"type": type(m).__name__, "bases": class_bases(type(m))}
        if module_slots.get(id(m), 0) > 1:
            d["id"] = module_id(m)
        params = []
        for name, p in m._parameters.items():
            if p is None:
                continue
            if id(p) in defined_params:
                params.append({"name": name, "ref": param_id(p)})
                continue
            defined_params.add(id(p))
            e = {"name": name, "shape": list(p.shape), "dtype": _dtype_name(p.dtype),
                 "requires_grad": bool(p.requires_grad)}
            if param_slots.get(id(p), 0) > 1:
                e["id"] = param_id(p)
            params.append(e)
        if params:
            d["params"] = params
        buffers = []
        non_persistent = getattr(m, "_non_persistent_buffers_set", set())
        for name, b in m._buffers.items():
            if b is None:
                continue
            e = {"name": name, "shape": list(b.shape), "dtype": _dtype_name(b.dtype)}
            if name in non_persistent:
                e["persistent"] = False
            buffers.append(e)
        if buffers:
            d["buffers"] = buffers
        attrs = hyperparameters(m)
        if attrs:
            d["attributes"] = attrs
        return d

    # Iterative pre-order in registration order: an object is defined where it is first
    # reached in document order, and later slots refer to it; deep models do not hit Python's
    # recursion limit.
    top = {}
    work = [(model, top)]
    while work:
        m, slot = work.pop()
        if id(m) in defined_modules:
            slot["module"] = {"ref": module_id(m)}
            continue
        defined_modules.add(id(m))
        d = describe(m)
        slot["module"] = d
        children = [{"name": name, "module": None} for name, c in m._modules.items()
                    if c is not None]
        if children:
            d["children"] = children
        kids = [c for c in m._modules.values() if c is not None]
        work.extend(reversed(list(zip(kids, children))))
    root = top["module"]
    return {"format": FORMAT, "module": root}


def write_model(model, path, indent=None):
    doc = export_model(model)
    text = json.dumps(doc, indent=indent, separators=None if indent else (",", ":"))
    if path == "-":
        sys.stdout.write(text + "\n")
    else:
        with open(path, "w") as f:
            f.write(text + "\n")


def _meta_context(torch):
    try:
        ctx = torch.device("meta")
        ctx.__enter__  # torch >= 2.0: a device is a context manager
        return ctx
    except AttributeError:
        return contextlib.nullcontext()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("expression", help="a Python expression that builds the module")
    ap.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    ap.add_argument("--import", dest="imports", action="append", default=[],
                    help="module to import first (repeatable)")
    ap.add_argument("--indent", type=int, default=None, help="pretty-print with this indent")
    args = ap.parse_args(argv)
    import torch
    import torch.nn

    env = {"torch": torch, "nn": torch.nn}
    for name in args.imports:
        top = name.split(".")[0]
        importlib.import_module(name)
        env[top] = importlib.import_module(top)
    with _meta_context(torch):
        model = eval(args.expression, env)  # noqa: S307 - the user's own expression
    if not isinstance(model, torch.nn.Module):
        ap.error(f"the expression built a {type(model).__name__}, not a torch.nn.Module")
    write_model(model, args.output, args.indent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
