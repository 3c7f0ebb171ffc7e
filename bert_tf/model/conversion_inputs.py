"""What python -m bert_tf.convert_checkpoint converts, worked out from its flags, and the
conversion: `convert(Request(...))` is the whole command (bert_tf/convert_checkpoint.py turns
the flags into a Request and prints the line this returns).

The inputs are resolved before anything is read or written, each failure one line naming the
flag: --from (a run directory -> its latest checkpoint; the format named or detected from the
path, refusing a path that is not what its format reads), its config (--bert_config_file or the
one beside the input), and the tokenizer written beside the output (--vocab_file and
--do_lower_case, by default what --from's folder records, checked against it:
provenance.check_tokenizer; a Hugging Face output needs both, a tf1 or keras output carries
what is known). The conversion itself is conversion.convert_resolved, its failures
named after the flag they concern (conversion_error). ArgumentError is a usage error (the command
exits 2).
"""

import dataclasses
import functools
import os
import re
from typing import Any, Dict, Optional, Tuple

from absl import logging
import tensorflow as tf

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import conversion
from bert_tf.model import provenance


class ArgumentError(ValueError):
  """A flag that names the wrong kind of thing or is missing (a usage error: exit 2)."""


@dataclasses.dataclass(frozen=True)
class Request:
  """A conversion as the command's flags give it (source is --from, target --to)."""
  source: str
  target: str
  source_format: Optional[str] = None
  target_format: Optional[str] = None
  bert_config_file: Optional[str] = None
  vocab_file: Optional[str] = None
  do_lower_case: Optional[bool] = None
  drop_head: bool = False
  overwrite: bool = False


@dataclasses.dataclass(frozen=True)
class Converted:
  """What convert wrote."""
  source: str
  source_format: str
  target: str
  target_format: str
  config: BertConfig
  head: Optional[str]
  task_info: Optional[Dict[str, Any]]

  def summary(self) -> str:
    """The command's closing line."""
    labels = (self.task_info or {}).get("labels")
    return (f"Wrote {self.target} ({self.target_format}, {self.config.num_hidden_layers} "
            f"layers, hidden {self.config.hidden_size}, "
            f"{f'{self.head} head' if self.head else 'no head'}"
            f"{f' with labels {labels}' if labels else ''}) from {self.source} "
            f"({self.source_format})")


def convert(request: Request) -> Converted:
  """Resolves the request's inputs (resolve_source, read_config, resolve_tokenizer) and converts
  (conversion.convert_resolved), every failure one line naming its flag."""
  target = request.target
  target_format = conversion.target_format_of(target, request.target_format)
  if target.endswith("/") or io.isdir(target):  # a usage error, before the rest
    try:
      conversion.check_conversion_outputs(target, target_format, request.overwrite)
    except IsADirectoryError as e:
      raise ArgumentError(f"--to={_text(e)}") from None
  source, source_format = resolve_source(request.source, request.source_format)
  config = read_config(request.bert_config_file, source, source_format)
  tokenizer = resolve_tokenizer(source, config, request.vocab_file, request.do_lower_case,
                                required=target_format == "hf")
  errors = functools.partial(conversion_error, source, source_format, target,
                             request.bert_config_file)
  _, head, task_info = conversion.convert_resolved(
      source, source_format, config, target, target_format, request.overwrite, tokenizer,
      request.drop_head, errors)
  return Converted(source, source_format, target, target_format, config, head, task_info)


# === What --from is ===

# The last 8 bytes of a TF table file (a checkpoint's .index, or a whole V1 checkpoint).
_TABLE_MAGIC = (0xdb4775248b80fb57).to_bytes(8, "little")

_EXPECTED = {
    "tf1": "a TF checkpoint prefix (the path before .index)",
    "model_garden": "a TF checkpoint prefix (the path before .index)",
    "bert_tf": "a TF checkpoint prefix (the path before .index) or a run's --output_dir",
    "hf": "a Hugging Face .safetensors file",
    "keras": "a .keras model file",
}
_NAMES = {"tf1": "an original TF1 checkpoint", "model_garden": "a Model Garden checkpoint",
          "bert_tf": "a run_pretraining checkpoint", "hf": "a safetensors file",
          "keras": "a .keras model"}
# What a path turned out to be (see _kind), for formats that cannot read it.
_FOUND = {
    "checkpoint": "a TF checkpoint prefix ({path}.index exists)",
    "table": "a TF table file (a checkpoint's .index?)",
    "safetensors": "a safetensors file",
    "zip": "a zip archive (such as a .keras model)",
    "other": "a file that is neither a TF checkpoint, safetensors nor a .keras model",
}
# The kinds of path each format can read ("other" is left to the reader, whose error is shown).
_READABLE = {"tf1": ("checkpoint", "table"), "model_garden": ("checkpoint", "table"),
             "bert_tf": ("checkpoint", "table"), "hf": ("safetensors", "other"),
             "keras": ("zip", "other")}


# === Messages ===


def _text(error: BaseException) -> str:
  """An exception's message on one line (a KeyError's without the quotes repr adds)."""
  if isinstance(error, KeyError) and len(error.args) == 1 and isinstance(error.args[0], str):
    text = error.args[0]
  else:
    text = getattr(error, "message", None) or str(error)  # tf.errors.OpError has .message
  return " ".join(text.split()) or type(error).__name__


def _flag_message(flag: str, path: str, error: BaseException) -> str:
  """`--flag=path: message`, without naming path twice when the message starts with it."""
  text = _text(error)
  if text.startswith(f"{path}: "):
    text = text[len(path) + 2:]
  return f"{flag}={path}: {text}"


def _read_error(source: str, source_format: str, error: BaseException) -> ValueError:
  """A failure to read --from as one line naming it.

  Our own errors (ValueError, KeyError, OSError) already say what is wrong; those of TensorFlow,
  Keras and zip files (a truncated checkpoint: "Read less bytes than requested", a truncated
  .keras file: "File not found") get said what was being read.
  """
  if isinstance(error, (ValueError, KeyError, OSError)) and source_format != "keras":
    return ValueError(_flag_message("--from", source, error))
  return ValueError(f"--from={source}: cannot read it as {_NAMES[source_format]} "
                    f"({_text(error)})")


def _exists_error(target: str, error: FileExistsError) -> FileExistsError:
  return FileExistsError(f"--to={target}: {_text(error)}; pass --overwrite to replace "
                         f"{'them' if str(error).endswith(' exist') else 'it'}")


def conversion_error(source: str, source_format: str, target: str,
                     bert_config_file: Optional[str], step: str, error: Exception) -> Exception:
  """A failed step of conversion.convert_resolved as one line naming the flag it concerns
  (--to for the outputs, --from for reading and converting the weights)."""
  if step == "outputs":
    if isinstance(error, IsADirectoryError):
      return ArgumentError(f"--to={_text(error)}")
    if isinstance(error, FileExistsError):
      return _exists_error(target, error)
    if isinstance(error, OSError):
      return type(error)(f"--to={target}: {_text(error)}")
  elif step in ("config", "read"):
    # TensorFlow, Keras and zip errors need not be ValueErrors; all become one line.
    return _read_error(source, source_format, error)
  elif step == "model":
    if isinstance(error, conversion.HeadError):
      return ValueError(_flag_message("--from", source, error) + "; pass --drop_head to "
                        "convert the encoder alone")
    if isinstance(error, checkpoints.CheckpointMismatchError):
      config_source = (f"--bert_config_file={bert_config_file}" if bert_config_file
                       else "the config beside it")
      return ValueError(f"--from={source}: the weights do not fit {config_source} "
                        f"({_text(error)})")
  elif step == "write":
    if isinstance(error, FileExistsError):  # made by someone else since the check, or beside
      return _exists_error(target, error)
    if isinstance(error, (OSError, tf.errors.OpError)):
      return OSError(f"--to={target}: cannot write the output ({_text(error)})")
  return error


# === Input ===


def _kind(path: str) -> str:
  """What `path` is: missing, directory, checkpoint (a prefix), table, safetensors, zip, other."""
  if io.isdir(path):
    return "directory"
  if not io.exists(path):
    return "checkpoint" if io.exists(path + ".index") else "missing"
  size = io.size(path)
  with io.open_file(path, "rb") as f:
    head = f.read(16)
    tail = b""
    if size >= 16:
      f.seek(size - 8)
      tail = f.read(8)
  if head.startswith(b"PK\x03\x04"):
    return "zip"
  if len(head) > 8 and head[8:9] == b"{":  # 8-byte header length, then the JSON header
    return "safetensors"
  if tail == _TABLE_MAGIC:
    return "table"
  return "checkpoint" if io.exists(path + ".index") else "other"


def resolve_source(path: str, from_format: Optional[str]) -> Tuple[str, str]:
  """The checkpoint --from names (a run directory -> its latest) and its format.

  Raises:
    FileNotFoundError: nothing at `path`, or a directory without a checkpoint.
    ValueError: `path` is not what its format (named or implied by the name) reads.
  """
  source = path
  if io.isdir(path):
    try:
      source = checkpoints.resolve_checkpoint(path)
    except FileNotFoundError as e:
      raise FileNotFoundError(f"--from={_text(e)}") from None
  # A sharded model, named by its index or one of its shards.
  if re.search(r"(\.safetensors\.index\.json|-\d+-of-\d+\.safetensors)$", source) and \
      io.exists(source):
    raise FileNotFoundError(
        f"--from={path} is part of a sharded model (its weights split across several "
        f".safetensors files), which is not read here; save the model as one "
        f"{checkpoints.HF_WEIGHTS_FILE}")
  kind = _kind(source)
  if kind == "missing":
    if source.endswith((".safetensors", ".keras")) or from_format in ("hf", "keras"):
      raise FileNotFoundError(f"--from={path}: file not found")
    raise FileNotFoundError(f"--from={path}: not found (no such file, and no checkpoint "
                            f"{source}.index)")
  for part in checkpoints.TF_CHECKPOINT_PARTS:
    if source.endswith(part) and io.exists(source[:-len(part)] + ".index"):
      raise ArgumentError(f"--from={path}: pass the checkpoint prefix "
                           f"{source[:-len(part)]}, not one of its files")
  source_format = from_format
  reason = f"for --from_format={from_format}"
  if source_format is None:
    source_format = ("hf" if source.endswith(".safetensors") else
                     "keras" if source.endswith(".keras") else "tf1")
    reason = "judging by its name"
  if kind not in _READABLE[source_format]:
    hint = "" if from_format is None else "; leave --from_format out to detect the format"
    raise ValueError(f"--from={path}: expected {_EXPECTED[source_format]} {reason}, found "
                     f"{_FOUND[kind].format(path=source)}{hint}")
  if from_format is None and source_format == "tf1":
    try:
      source_format = checkpoints.detect_format(source)
    except (ValueError, OSError, tf.errors.OpError) as e:
      raise ValueError(_flag_message("--from", source, e)) from e
  return source, source_format


def read_config(path: Optional[str], source: str, source_format: str):
  """The BertConfig of --bert_config_file, or the one beside (or inside) the input."""
  if path:
    if not io.exists(path):
      raise FileNotFoundError(f"--bert_config_file={path}: file not found")
    if io.isdir(path):
      raise IsADirectoryError(f"--bert_config_file={path}: is a folder, not a JSON file")
    try:
      return BertConfig.from_json_file(path)
    except (ValueError, OSError) as e:  # ConfigError, UnicodeDecodeError, unreadable
      raise ValueError(_flag_message("--bert_config_file", path, e)) from e
  if source_format != "keras":
    name = "config.json" if source_format == "hf" else "bert_config.json"
    if not io.exists(io.join(os.path.dirname(source) or ".", name)):
      raise ArgumentError(f"--from={source}: no {name} beside it; pass --bert_config_file")
  try:
    return checkpoints.config_beside(source, source_format)
  except Exception as e:  # pylint: disable=broad-except
    raise _read_error(source, source_format, e) from e


def resolve_tokenizer(source: str, config, vocab_file: Optional[str],
                      do_lower_case: Optional[bool], required: bool = True):
  """The tokenizer written beside the output: --vocab_file (default: the vocab.txt beside
  --from, which run_pretraining, Hugging Face, the original's releases and our conversions
  record) and --do_lower_case (default: what --from's folder records), checked against what the
  model was trained with and against the config's vocab_size (provenance.check_tokenizer).

  required (an hf output) makes a missing vocab or casing a usage error; otherwise (tf1, keras)
  the output carries what is known: None, with a warning, when there is no vocab."""
  casing = do_lower_case if do_lower_case is not None else \
      provenance.recorded_tokenizer(source).get("do_lower_case")
  if not required:
    tokenizer = conversion.tokenizer_beside(source, vocab_file, casing,
                                            names=("--vocab_file", "--do_lower_case"))
    if tokenizer is None:
      logging.warning("--from=%s: no vocab.txt beside it, so none is written beside the output; "
                      "pass --vocab_file (and --do_lower_case) to write the model's tokenizer "
                      "there", source)
      return None
    provenance.check_tokenizer(tokenizer.vocab_file, tokenizer.do_lower_case,
                               checkpoints=[source], vocab_size=config.vocab_size,
                               override_flag=None)
    return tokenizer
  try:
    tokenizer = conversion.hf_tokenizer(source, vocab_file, casing,
                                         names=("--vocab_file", "--do_lower_case"))
  except FileNotFoundError:
    if vocab_file:
      raise
    raise ArgumentError(f"--from={source}: no vocab.txt beside it; pass --vocab_file (a Hugging "
                         "Face model folder holds its tokenizer's vocab)") from None
  except ValueError:
    raise ArgumentError(
        f"--from={source}: nothing beside it records the casing of its vocab (task_info.json, "
        "data_metadata.json, tokenizer_config.json); pass --do_lower_case=true (uncased) or "
        "false (cased) for the output's tokenizer_config.json") from None
  provenance.check_tokenizer(tokenizer.vocab_file, tokenizer.do_lower_case, checkpoints=[source],
                             vocab_size=config.vocab_size, override_flag=None)
  return tokenizer
