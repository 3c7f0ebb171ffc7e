"""Converting a checkpoint to another format, with what belongs beside it, checked and atomic.

Any checkpoint checkpoints.read_weights reads (original TF1, Model Garden, Hugging Face, .keras,
ours) becomes a tf1 checkpoint, a Hugging Face model folder or a .keras model. The source's head,
pretraining or fine-tuned, is kept in every output format (the model holding it is built here,
see source_head), and a conversion refuses to drop one it cannot hold unless told to
(drop_head). What the model has is written; what the target layout expects but the model never
had (the pooler of a model whose head reads every position, in the TF1 layout) is logged in one
line
(report_layout_gaps). python -m bert_tf.convert_checkpoint is convert_resolved with its inputs
resolved and its errors naming its flags (model.conversion_inputs.convert).
"""

import dataclasses
import json
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from absl import logging
import keras
import numpy as np

from bert_tf import io
from bert_tf.config import BertConfig, hf_activation
from bert_tf.model import head_specs
from bert_tf.model import provenance
from bert_tf.model.checkpoints import (
    FORMATS, HF_ARCHITECTURES, HF_SPECIAL_TOKENS_FILE, CheckpointMismatchError, describe_sizes,
    HF_TOKENIZER_CONFIG_FILE, HF_VOCAB_FILE, HF_WEIGHTS_FILE, OUTPUT_WEIGHTS_HEADS, PRETRAINING,
    TASK_INFO_FILE, TF_CHECKPOINT_PARTS, config_beside, detect_format, head_of_task_info,
    model_garden_head_variables, model_head, original_name, original_variable_shapes,
    read_hf_casing, read_weights, recorded_task_info, resolve_checkpoint, save_hf_safetensors,
    save_tf1_checkpoint, set_original_weights)
from bert_tf.model.encoder import build_encoder
from bert_tf.model.heads import build_pretraining_model

# === The head a conversion keeps ===
# The pooler is not part of the models of heads that read every position (HeadSpec.pooler
# False; nor of Hugging Face's models of them): fine-tuning them never changes it.
_NOT_IN_SEQUENCE_MODELS = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")


class HeadError(ValueError):
  """A head that a conversion would drop, or whose kind contradicts what it is loaded as."""


def head_kinds(values: Mapping[str, object]) -> List[str]:
  """The heads whose weights are among `values` (original names); weights that several heads
  name alike (output_weights: every head of OUTPUT_WEIGHTS_HEADS) are listed as the default
  head's (head_specs.default_kind; source_head reads which they are)."""
  kinds = []
  if any(n.startswith(("cls/predictions/", "cls/seq_relationship/")) for n in values):
    kinds.append(PRETRAINING)
  for names, owners in head_specs.weight_groups().items():
    if any(n in names for n in values):
      kinds.append(head_specs.default_kind(owners))
  return kinds


def source_head(path: str, source_format: str, values: Mapping[str, np.ndarray]
                ) -> Tuple[Optional[str], Optional[Dict[str, Any]]]:
  """The head the weights `values` read from `path` hold, and its task info.

  Returns:
    (head, task_info): head is PRETRAINING, a registered head's kind (head_specs) or None (an
    encoder); task_info (fine-tuned heads only) is what is recorded beside the checkpoint (see
    recorded_task_info) with "head" set, or just {"head": ...} when nothing is: output_weights
    are then the default head's (HeadKind.default), as the original's fine-tuning script wrote
    them.

  Raises:
    HeadError: several heads (one model holds one), a head recorded as another kind, a Hugging
      Face head we have no model for, or labels that do not fit the head.
  """
  kinds = head_kinds(values)
  if len(kinds) > 1:
    raise HeadError(f"{path}: holds several heads ({', '.join(kinds)}); a model holds one")
  info, where = recorded_task_info(path)
  if kinds == [PRETRAINING] and info and info.get("architecture"):
    # Part of the pretraining heads under a class of their own (BertForNextSentencePrediction,
    # BertForMaskedLM): no model here holds them alone.
    raise HeadError(f"{path}: {where} says {info['architecture']}, whose head has no "
                    "equivalent here")
  if kinds in ([], [PRETRAINING]):
    return (kinds[0] if kinds else None), None
  head = kinds[0]
  if info and info.get("architecture"):
    raise HeadError(f"{path}: {where} says {info['architecture']}, whose head has no "
                    "equivalent here")
  recorded = head_of_task_info(info)
  shared = head in OUTPUT_WEIGHTS_HEADS  # the default head's kind, for weights several share
  if shared and recorded in OUTPUT_WEIGHTS_HEADS:
    head = recorded
  elif shared and recorded is None and source_format == "keras":
    head = model_head(keras.models.load_model(path))
  elif recorded not in (None, head):
    raise HeadError(f"{path}: holds a {head} head but {where} describes a {recorded}'s")
  if recorded is None and shared and head == kinds[0]:
    logging.info("%s: output_weights / output_bias taken as a %s's head (nothing beside it says "
                 "otherwise)", path, head)
  info = dict(info or {}, head=head)
  spec = head_specs.spec_of(head)
  problem = spec.check_weights(values) if spec and spec.check_weights else None
  if problem:
    raise HeadError(f"{path}: {problem}")
  if provenance.HEAD_KINDS[head].labelled:
    outputs = int(np.shape(values.get("output_bias", values.get("output_weights")))[0])
    labels = info.get("labels")
    if labels is not None and len(labels) != outputs:
      raise HeadError(f"{path}: {where} lists {len(labels)} labels but the head has "
                      f"{outputs} outputs")
  return head, info


def build_head_model(config: BertConfig, head: Optional[str],
                     values: Optional[Mapping[str, np.ndarray]] = None):
  """The model holding `head` (see source_head; a registered head's as its HeadSpec builds it),
  its number of labels read from values."""
  outputs = None
  if head in OUTPUT_WEIGHTS_HEADS:
    outputs = head_specs.output_count(values)
  spec = head_specs.spec_of(head)
  if spec is not None:
    return spec.build(config, outputs)
  if head == PRETRAINING:
    return build_pretraining_model(config)
  return build_encoder(config)


# === What is written beside the weights ===
# Hugging Face's tokenizer files: special_tokens_map.json, and tokenizer_config.json as
# hf_tokenizer_config writes it.
HF_SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                     "cls_token": "[CLS]", "mask_token": "[MASK]"}


def hf_tokenizer_config(do_lower_case: bool, max_length: int) -> Dict[str, object]:
  """tokenizer_config.json of a BERT WordPiece tokenizer as the original's FullTokenizer reads
  text: lower-casing and accent stripping together (strip_accents None follows the casing), CJK
  characters split, every text basic-tokenized first."""
  return dict(HF_SPECIAL_TOKENS, tokenizer_class="BertTokenizer",
              do_lower_case=bool(do_lower_case), do_basic_tokenize=True, never_split=None,
              tokenize_chinese_chars=True, strip_accents=None, model_max_length=max_length)


@dataclasses.dataclass(frozen=True)
class Tokenizer:
  """The tokenizer written beside a converted model: the vocab file and its casing (None: not
  known, which only a Hugging Face output refuses)."""
  vocab_file: str
  do_lower_case: Optional[bool]


def hf_config_dict(config: BertConfig, head: Optional[str] = None,
                   task_info: Optional[Mapping[str, Any]] = None) -> Dict[str, object]:
  """A Hugging Face config.json dict for our config (their "gelu" is the exact form) and the
  class that holds `head` (HF_ARCHITECTURES): BertModel without one. A labelled head's labels
  (HeadKind.labelled; task_info["labels"], in id order) become id2label / label2id; without
  labels it gets the placeholders LABEL_0, ... for its number of outputs (task_info["outputs"]),
  and a head that may be a regressor (HeadKind.regression) its problem_type."""
  values = config.to_dict()
  values.update(hidden_act=hf_activation(config.hidden_act), layer_norm_eps=1e-12,
                model_type="bert", position_embedding_type="absolute", pad_token_id=0,
                architectures=[HF_ARCHITECTURES[head]])
  kind = provenance.HEAD_KINDS.get(head)
  if kind is not None and kind.labelled:
    info = task_info or {}
    labels = info.get("labels") or [f"LABEL_{i}" for i in range(info.get("outputs", 2))]
    values.update(id2label={str(i): label for i, label in enumerate(labels)},
                  label2id={label: i for i, label in enumerate(labels)})
    if kind.regression:
      values["problem_type"] = ("regression" if info.get("regression") else
                                "single_label_classification")
  return values


# === Conversion: checked, atomic outputs ===
WRITABLE_FORMATS = ("tf1", "hf", "keras")


def target_format_of(target: str, target_format: Optional[str] = None) -> str:
  """target_format, or the one the target's name implies (.safetensors hf, .keras keras, tf1)."""
  if target_format:
    if target_format not in FORMATS:
      raise ValueError(f"target_format {target_format!r} is not one of {', '.join(FORMATS)}")
    if target_format not in WRITABLE_FORMATS:
      raise ValueError(f"writing {target_format} checkpoints is not supported here; write "
                       f"{', '.join(WRITABLE_FORMATS)} (every --init_checkpoint reads them all)")
    return target_format
  if target.endswith(".safetensors"):
    return "hf"
  return "keras" if target.endswith(".keras") else "tf1"


def config_output_path(target: str, target_format: str) -> Optional[str]:
  """The config file written beside a converted model (None for keras: it is inside)."""
  name = {"tf1": "bert_config.json", "hf": "config.json"}.get(target_format)
  return f"{io.dirname(target)}/{name}" if name else None


def tokenizer_output_paths(target: str, target_format: str,
                           tokenizer: Optional[Tokenizer] = None) -> List[str]:
  """The tokenizer files written beside a converted model.

  A Hugging Face folder always holds vocab.txt, tokenizer_config.json (the casing) and
  special_tokens_map.json. Beside a tf1 checkpoint or a .keras file go the vocab.txt of a known
  tokenizer, as in the original's release folders, and its casing in tokenizer_config.json (the
  release folders say it by their name, uncased_L-12_H-768_A-12, which a converted folder cannot
  choose; every command here reads tokenizer_config.json), so that the folder converts onwards
  and fine-tunes without --vocab_file and --do_lower_case.
  """
  directory = io.dirname(target)
  if target_format == "hf":
    names = (HF_VOCAB_FILE, HF_TOKENIZER_CONFIG_FILE, HF_SPECIAL_TOKENS_FILE)
  elif tokenizer is None:
    names = ()
  else:
    names = (HF_VOCAB_FILE,) + (() if tokenizer.do_lower_case is None
                                else (HF_TOKENIZER_CONFIG_FILE,))
  return [io.join(directory, name) for name in names]


def conversion_outputs(target: str, target_format: str,
                       tokenizer: Optional[Tokenizer] = None) -> List[str]:
  """Every file a conversion to `target` writes, whatever the model: the weights file(s), the
  config and the tokenizer files (tokenizer_output_paths). (A fine-tuned head adds
  task_info.json: see write_converted.)"""
  paths = ([target + part for part in TF_CHECKPOINT_PARTS] if target_format == "tf1"
           else [target])
  config_path = config_output_path(target, target_format)
  return (paths + ([config_path] if config_path else [])
          + tokenizer_output_paths(target, target_format, tokenizer))


def _same_file_content(a: str, b: str) -> bool:
  if io.size(a) != io.size(b):
    return False
  with io.open_file(a, "rb") as f, io.open_file(b, "rb") as g:
    return f.read() == g.read()


def _existing_outputs(paths: List[str], tokenizer: Optional[Tokenizer]) -> List[str]:
  """The paths that exist, except a vocab.txt equal to the one that would be written (e.g. the
  source's own, when the output goes beside it)."""
  return [path for path in paths if io.exists(path) and not (
      tokenizer and path.endswith("/" + HF_VOCAB_FILE) and not io.isdir(path)
      and _same_file_content(path, tokenizer.vocab_file))]


def check_conversion_outputs(target: str, target_format: str, overwrite: bool,
                             tokenizer: Optional[Tokenizer] = None) -> None:
  """Refuses existing outputs (unless overwrite) and an output folder that cannot be made.

  Called before the (long) read, so a refused conversion costs nothing. Messages start with
  the offending path; callers add their flag names. A vocab.txt equal to the tokenizer's is
  not in the way.

  Raises:
    IsADirectoryError: target is a directory.
    FileExistsError: an output exists and overwrite is False.
    OSError: the output folder cannot be created or written (local paths; other filesystems
      report that when the output is written).
  """
  if target.endswith("/") or io.isdir(target):
    raise IsADirectoryError(f"{target} is a directory; name the output file in it, e.g. "
                            f"{io.join(target, 'model.safetensors')} or "
                            f"{io.join(target, 'bert_model.ckpt')}")
  existing = _existing_outputs(conversion_outputs(target, target_format, tokenizer), tokenizer)
  if existing and not overwrite:
    raise FileExistsError(f"{', '.join(existing)} already "
                          f"{'exists' if len(existing) == 1 else 'exist'}")
  if not io.is_local(target):
    return
  directory = os.path.dirname(target) or "."
  parent = directory
  while not os.path.exists(parent) and os.path.dirname(parent) not in ("", parent):
    parent = os.path.dirname(parent)
  if not os.path.exists(parent):
    parent = "."
  if not os.path.isdir(parent):
    raise NotADirectoryError(f"cannot create the output folder {directory}: {parent} is a "
                             "file, not a folder")
  if not os.access(parent, os.W_OK | os.X_OK):
    raise PermissionError(f"the folder {parent} is not writable")


def write_converted(model, config: BertConfig, target: str, target_format: str,
                    overwrite: bool, task_info: Optional[Mapping[str, Any]] = None,
                    tokenizer: Optional[Tokenizer] = None) -> None:
  """Writes a model's weights as target_format with what belongs beside them, atomically.

  Beside the weights: the config (bert_config.json for tf1, config.json naming the Hugging Face
  class of the model's head for hf; inside the file for keras); the tokenizer files
  (tokenizer_output_paths: for hf vocab.txt, tokenizer_config.json and special_tokens_map.json,
  so that the folder loads with transformers' from_pretrained like any Hugging Face model
  folder; for tf1 and keras the vocab.txt and casing of a given tokenizer); and, when the model
  has a fine-tuned head and task_info is given, task_info.json (its labels and kind; for hf the
  labels are also config.json's id2label).

  Every file is written under a temporary name and renamed; the files beside the weights are
  renamed first, so weights under their final name always have them. Existing outputs are
  refused before anything is written (unless overwrite); a failure removes the temporaries.

  Raises:
    FileExistsError: an output exists and overwrite is False.
    ValueError: hf without a tokenizer or its casing.
  """
  head = model_head(model)
  fine_tuned = head not in (None, PRETRAINING)
  directory = io.dirname(target)
  beside: Dict[str, Any] = {}  # path -> text, or a file to copy
  if target_format == "tf1":
    beside[config_output_path(target, "tf1")] = config.to_json_string()
  elif target_format == "hf":
    if tokenizer is None or tokenizer.do_lower_case is None:
      raise ValueError(f"{target}: a Hugging Face model folder needs its tokenizer (the vocab "
                       "and its casing)")
    if os.path.basename(target) != HF_WEIGHTS_FILE:
      logging.warning("%s: Hugging Face's from_pretrained reads %s, not this name", target,
                      HF_WEIGHTS_FILE)
    info = dict(task_info or {})
    if head is not None and provenance.HEAD_KINDS[head].labelled:
      info["outputs"] = _outputs(model, head)
    beside[config_output_path(target, "hf")] = _json_text(hf_config_dict(config, head, info))
  beside.update(_tokenizer_files(target, target_format, tokenizer, config))
  if fine_tuned and task_info is not None:
    beside[io.join(directory, TASK_INFO_FILE)] = _json_text(dict(task_info, head=head))
  existing = [path for path in beside if io.exists(path)]
  if existing and not overwrite:
    raise FileExistsError(f"{', '.join(existing)} already "
                          f"{'exists' if len(existing) == 1 else 'exist'}")
  target_paths = (dict(parts=TF_CHECKPOINT_PARTS) if target_format == "tf1" else
                  dict(suffix=".keras") if target_format == "keras" else {})  # Keras wants it
  with io.atomic_path(target, overwrite=overwrite, **target_paths) as tmp:
    if target_format == "tf1":
      save_tf1_checkpoint(model, tmp)
    elif target_format == "hf":
      save_hf_safetensors(model, tmp, prefix="bert." if head else "")
    else:
      model.save(tmp)
    for path, content in beside.items():
      if isinstance(content, tuple):
        io.copy(content[1], path, overwrite=overwrite)
      else:
        with io.atomic_write(path, overwrite=overwrite) as f:
          f.write(content)


def _tokenizer_files(target: str, target_format: str, tokenizer: Optional[Tokenizer],
                     config: BertConfig) -> Dict[str, Any]:
  """The tokenizer files of write_converted's `beside`: path -> text, or ("copy", file). A
  vocab.txt already there with the same content is left as it is."""
  files: Dict[str, Any] = {}
  for path in tokenizer_output_paths(target, target_format, tokenizer):
    name = os.path.basename(path)
    if name == HF_VOCAB_FILE:
      if _existing_outputs([path], tokenizer) or not io.exists(path):  # else: equal
        files[path] = ("copy", tokenizer.vocab_file)
    elif name == HF_TOKENIZER_CONFIG_FILE:
      files[path] = _json_text(hf_tokenizer_config(tokenizer.do_lower_case,
                                                   config.max_position_embeddings))
    else:
      files[path] = _json_text(HF_SPECIAL_TOKENS)
  return files


def _outputs(model, head: str) -> int:
  """The number of outputs of a registered head's model (its dense layer's)."""
  return model.get_layer(head_specs.spec_of(head).weights.layer).kernel.shape[-1]


def layout_gaps(model, config: BertConfig, target_format: str) -> List[str]:
  """The weights (original names) that target_format's layout has for a model with `model`'s
  head but `model` does not: what a conversion to it cannot write.

  The original's modeling.py:BertModel always builds the pooler, so every checkpoint in its TF1
  layout (the release's, and its fine-tuning scripts') holds bert/pooler/dense/*; the model of a
  head on every position (HeadSpec.pooler False) has no pooler, as Hugging Face's models of
  those heads have none (add_pooling_layer=False). A .keras file is the model itself.
  """
  head = model_head(model)
  if target_format not in ("tf1", "hf"):
    return []
  spec = head_specs.spec_of(head)
  head_shapes = (spec.weights.original_shapes(config.hidden_size, _outputs(model, head))
                 if spec is not None else None)
  expected = original_variable_shapes(config, heads=head == PRETRAINING, head_shapes=head_shapes)
  if target_format == "hf" and spec is not None and not spec.pooler:
    expected = [name for name in expected if name not in _NOT_IN_SEQUENCE_MODELS]
  held = {original_name(variable.path)[0] for variable in model.weights}
  return [name for name in expected if name not in held]


_LAYOUTS = {"tf1": "the original TF1 layout", "hf": "Hugging Face's layout"}


def report_layout_gaps(model, config: BertConfig, target: str, target_format: str) -> List[str]:
  """Logs, in one line, what target_format's layout expects but `model` never had (layout_gaps;
  e.g. the pooler in the TF1 layout of a model without one): the conversion writes the rest,
  without them.

  Returns:
    The names missing (none for most models and formats).
  """
  gaps = layout_gaps(model, config, target_format)
  if gaps:
    head = model_head(model) or "encoder"
    logging.warning(
        "%s: written without %s: %s has them but a %s model has none (its head never uses "
        "them); a model that reads this checkpoint and needs them starts them fresh", target,
        ", ".join(gaps), _LAYOUTS[target_format], head)
  return gaps


def _json_text(values: Mapping[str, Any]) -> str:
  return json.dumps(values, indent=2, sort_keys=True) + "\n"


def converted_model(config: BertConfig, values: Mapping[str, np.ndarray], source: str,
                    source_format: str, drop_head: bool = False):
  """The model a conversion writes: the one holding the source's head (see source_head) with
  every weight of the source, and the head's task info.

  Nothing is dropped silently: weights that the model cannot hold raise HeadError unless
  drop_head, which converts the encoder alone. Only the pooler of a checkpoint whose head reads
  every position is left out (with an INFO line): those models have none (nor do Hugging
  Face's), fine-tuning never changes it.

  Returns:
    (model, task_info); task_info is None without a fine-tuned head.

  Raises:
    HeadError: a head would be dropped (see also source_head).
    CheckpointMismatchError: a name or shape does not fit the config.
  """
  if source_format == "model_garden" and not drop_head:
    heads = model_garden_head_variables(source)
    if heads:
      shown = ", ".join(heads[:4]) + (f" and {len(heads) - 4} more" if len(heads) > 4 else "")
      raise HeadError(f"{source}: holds variables beside its encoder ({shown}): a Model Garden "
                      "head, which has no original names and would be dropped")
  head, task_info = (None, None) if drop_head else source_head(source, source_format, values)
  model = build_head_model(config, head, values)
  held = {original_name(variable.path)[0] for variable in model.weights}
  left_out = [name for name in values if name not in held]
  spec = head_specs.spec_of(head)
  no_pooler = spec is not None and not spec.pooler
  dropped = [name for name in left_out if not (no_pooler and name in _NOT_IN_SEQUENCE_MODELS)]
  encoder_left_out = [name for name in dropped if name.startswith("bert/")]
  if encoder_left_out:  # the encoder itself does not fit: no head flag can help
    detail = (describe_sizes({n: np.shape(v) for n, v in values.items()},
                             original_variable_shapes(config, heads=False), "it")
              or "its encoder has variables the config has no place for")
    raise CheckpointMismatchError(
        f"{detail}; {len(encoder_left_out)} encoder variables left over, e.g. "
        f"{', '.join(sorted(encoder_left_out)[:2])}")
  if dropped and not drop_head:
    raise HeadError(f"{source}: {', '.join(dropped)} would be dropped (a {head or 'encoder'} "
                    "model has no such weights)")
  if left_out:
    logging.info("Not in the converted %s model: %s", head or "encoder", ", ".join(left_out))
  set_original_weights(model, {n: v for n, v in values.items() if n in held}, source=source)
  return model, task_info


def tokenizer_beside(source: str, vocab_file: Optional[str] = None,
                     do_lower_case: Optional[bool] = None,
                     names: Tuple[str, str] = ("vocab_file", "do_lower_case")
                     ) -> Optional[Tokenizer]:
  """The tokenizer of the model at `source`, to write beside a conversion of it.

  Args:
    source: the checkpoint converted (a file or prefix).
    vocab_file: the vocab, or a folder holding vocab.txt; default: the vocab.txt beside source.
    do_lower_case: the casing; default: what a Hugging Face tokenizer_config.json beside the
      vocab or beside source says.
    names: how messages name the two (the command's flags).

  Returns:
    The Tokenizer (its do_lower_case None when nothing says it), or None when vocab_file is
    None and no vocab.txt is beside source.

  Raises:
    FileNotFoundError: a vocab_file that does not exist, or a folder without vocab.txt.
  """
  vocab_name, _ = names
  if vocab_file is None:
    vocab_file = io.join(io.dirname(source), HF_VOCAB_FILE)
    if not io.exists(vocab_file):
      return None
  elif io.isdir(vocab_file):
    folder, vocab_file = vocab_file, io.join(vocab_file, HF_VOCAB_FILE)
    if not io.exists(vocab_file):
      raise FileNotFoundError(f"{vocab_name}={folder}: a folder without {HF_VOCAB_FILE}")
  elif not io.exists(vocab_file):
    raise FileNotFoundError(f"{vocab_name}={vocab_file}: file not found")
  if do_lower_case is None:
    for directory in (io.dirname(vocab_file), io.dirname(source)):
      do_lower_case = read_hf_casing(directory)
      if do_lower_case is not None:
        break
  return Tokenizer(vocab_file, None if do_lower_case is None else bool(do_lower_case))


def hf_tokenizer(source: str, vocab_file: Optional[str] = None,
                 do_lower_case: Optional[bool] = None,
                 names: Tuple[str, str] = ("vocab_file", "do_lower_case")) -> Tokenizer:
  """The tokenizer to write beside a Hugging Face model converted from `source`
  (tokenizer_beside), which must be known in full.

  Raises:
    FileNotFoundError: no vocab (a missing vocab_file, or none beside the source).
    ValueError: the casing is not known.
  """
  vocab_name, casing_name = names
  tokenizer = tokenizer_beside(source, vocab_file, do_lower_case, names)
  if tokenizer is None:
    raise FileNotFoundError(f"no {HF_VOCAB_FILE} beside {source}; pass {vocab_name} (a Hugging "
                            "Face model folder holds its tokenizer's vocab)")
  if tokenizer.do_lower_case is None:
    raise ValueError(f"the casing of {tokenizer.vocab_file} is not known; pass {casing_name}=true "
                     "(uncased) or false (cased): tokenizer_config.json records it")
  return tokenizer


def convert_checkpoint(source: str, target: str, source_format: Optional[str] = None,
                       target_format: Optional[str] = None,
                       config: Optional[BertConfig] = None,
                       overwrite: bool = False, vocab_file: Optional[str] = None,
                       do_lower_case: Optional[bool] = None,
                       drop_head: bool = False) -> BertConfig:
  """Converts BERT weights between the original TF1 checkpoint layout, Model Garden checkpoints
  (reading only), Hugging Face model folders and our .keras models, keeping the source's head.

  What is written beside the output: see write_converted (config; for hf the tokenizer files;
  task_info.json with a fine-tuned head). Outputs are checked before the weights are read and
  written atomically; python -m bert_tf.convert_checkpoint (conversion_inputs.convert) resolves
  its flags with one-line errors naming them (and the casing looked up in every file that
  records it) and then runs convert_resolved, as this function does.

  Args:
    source: input path (TF checkpoint prefix, .safetensors or .keras file, a run directory for
      its latest checkpoint, or a Hugging Face model folder).
    target: output path (TF checkpoint prefix, .safetensors or .keras file).
    source_format, target_format: one of FORMATS; detected from the paths when None.
    config: the model config; when None it is read from bert_config.json beside a tf1 or
      Model Garden source, config.json beside a safetensors file, or the .keras model.
    overwrite: replace existing outputs (the weights and the files beside them).
    vocab_file, do_lower_case: the tokenizer written beside the output (see
      tokenizer_output_paths); by default the vocab.txt beside the source and the casing its
      tokenizer_config.json records. An hf output needs both (see hf_tokenizer); a tf1 or keras
      output without a vocab gets none.
    drop_head: convert the encoder alone; without it a head that the output would lose is
      refused (HeadError).

  Returns:
    The config of the converted model.

  Raises:
    FileExistsError: an output exists and overwrite is False (nothing is read or written).
    HeadError: the source's head would be dropped, or is not what is recorded beside it.
  """
  target_format = target_format_of(target, target_format)
  if source_format is not None and source_format not in FORMATS:
    raise ValueError(f"source_format {source_format!r} is not one of {', '.join(FORMATS)}")
  source = resolve_checkpoint(source)
  tokenizer = (hf_tokenizer if target_format == "hf" else tokenizer_beside)(
      source, vocab_file, do_lower_case)
  source_format = source_format or detect_format(source)
  config, _, _ = convert_resolved(source, source_format, config, target, target_format,
                                  overwrite, tokenizer, drop_head)
  logging.info("Converted %s (%s) to %s (%s)", source, source_format, target, target_format)
  return config


def _library_error(step: str, error: Exception) -> Exception:
  if step == "outputs" and isinstance(error, FileExistsError):
    return FileExistsError(f"{error}; pass overwrite=True to replace")
  return error


def convert_resolved(source: str, source_format: str, config: Optional[BertConfig], target: str,
                     target_format: str,
                     overwrite: bool = False, tokenizer: Optional[Tokenizer] = None,
                     drop_head: bool = False,
                     errors: Callable[[str, Exception], Exception] = _library_error
                     ) -> Tuple[BertConfig, Optional[str], Optional[Dict[str, Any]]]:
  """The steps of every conversion once its paths, formats and tokenizer are known: the outputs
  checked (before the long read), the weights read, the model holding them and their head
  built (converted_model), the outputs written (write_converted), and what the target layout
  expects but the model never had said in one line (report_layout_gaps).

  Args:
    source, source_format: a resolved checkpoint path (see resolve_checkpoint) and its format.
    config: the model config; None: the one beside the source (config_beside), read after the
      outputs are checked.
    target, target_format, overwrite, tokenizer: see write_converted.
    drop_head: see converted_model.
    errors: (step, error) -> the exception to raise instead, so that a command can name its
      flags; step is "outputs", "config", "read", "model" or "write".

  Returns:
    (config, head, task_info) of the converted model (see converted_model, model_head).
  """
  step = "outputs"
  try:
    check_conversion_outputs(target, target_format, overwrite, tokenizer)
    step = "config"
    config = config or config_beside(source, source_format)
    step = "read"
    values = read_weights(source, config, source_format)
    step = "model"
    model, task_info = converted_model(config, values, source, source_format, drop_head)
    step = "write"
    write_converted(model, config, target, target_format, overwrite, task_info, tokenizer)
    report_layout_gaps(model, config, target, target_format)
  except Exception as e:  # pylint: disable=broad-except
    replacement = errors(step, e)
    if replacement is e:
      raise
    raise replacement from e
  return config, model_head(model), task_info
