"""The default model's GGUF at the precision of a comparison: the shipped Q4_1 as it is, or
F32 / F16 files dequantised from it (the same weights Batchscope and vLLM load, since both
dequantise this file too; F16 then rounds them to half precision).

Written once into ``<batchscope cache>/gguf/`` with the ``gguf`` package: every metadata field
is copied, every 2-D weight is dequantised and stored in the target type, 1-D tensors (norms)
stay F32 as llama.cpp's own converter keeps them.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

PRECISIONS = ("f32", "f16", "q4_1")  # llama.cpp's names; q4_1 is the shipped file
_SKIPPED_FIELDS = ("GGUF.", "general.file_type")


def gguf_for(precision: str) -> Path:
    """Path of the default model's GGUF in ``precision``, converting it on first use."""
    from engine.loader import cache_root, default_gguf_path

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    source = default_gguf_path()
    if precision == "q4_1":
        return source
    target = cache_root() / "gguf" / f"{source.stem.rsplit('.', 1)[0]}.{precision.upper()}.gguf"
    if not target.is_file():
        convert(source, target, precision)
    return target


def convert(source: Path, target: Path, precision: str) -> None:
    import gguf

    reader = gguf.GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    writer = gguf.GGUFWriter(tmp, arch)
    for name, field in reader.fields.items():
        if name.startswith(_SKIPPED_FIELDS) or name == "general.architecture":
            continue
        sub_type = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), field.types[0], sub_type)
    file_type = gguf.LlamaFileType.ALL_F32 if precision == "f32" else gguf.LlamaFileType.MOSTLY_F16
    writer.add_file_type(file_type)
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        dtype = np.float16 if precision == "f16" and values.ndim > 1 else np.float32
        writer.add_tensor(tensor.name, np.ascontiguousarray(values.astype(dtype)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(target)
