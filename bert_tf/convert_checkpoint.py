"""Converts BERT weights between formats: python -m bert_tf.convert_checkpoint --from=A --to=B.

Formats: tf1 (the original release's checkpoints, e.g. bert_model.ckpt), model_garden (TF Model
Garden BertEncoder / BertEncoderV2 checkpoints; read only), hf (Hugging Face model folders:
model.safetensors with config.json and the tokenizer files), keras (our .keras models) and bert_tf
(checkpoints written by our run_pretraining and fine-tuning runs, or their --output_dir for the
latest one; read only). They are detected from the paths unless named with --from_format /
--to_format. The config comes from --bert_config_file, or from bert_config.json (tf1, Model
Garden) or config.json (hf) beside the input.

The head is kept: a fine-tuned classifier, SQuAD or tagger head goes to every output format (the
original's output_weights / cls/squad names in tf1, Hugging Face's classifier.* / qa_outputs.*
with the class in config.json's architectures, the task model in keras), its labels and kind to
task_info.json beside the output (and config.json's id2label). A head that cannot be kept is
refused; --drop_head converts the encoder alone. What the model has is written: a part that the
output's layout expects but the model never had (a tagger's or span model's pooler in tf1) is
named in one warning line and does not stop the conversion.

Beside the output: the config (bert_config.json for tf1, config.json for hf); for hf the
tokenizer (vocab.txt, tokenizer_config.json with the casing, special_tokens_map.json), from
--vocab_file / --do_lower_case or what the input's folder records. Existing outputs are refused
unless --overwrite is given; everything is written under a temporary name and renamed when
complete, the weights last.

Examples:
  python -m bert_tf.convert_checkpoint --from=uncased_L-12_H-768_A-12/bert_model.ckpt \\
      --to=out/model.safetensors
  python -m bert_tf.convert_checkpoint --from=hf_model_folder --to=out/bert_model.ckpt
  python -m bert_tf.convert_checkpoint --from=classifier_run --vocab_file=vocab.txt \\
      --to=hf_classifier/model.safetensors
"""

import functools
import os
from typing import Optional, Tuple

from absl import flags

from bert_tf import cli
from bert_tf import io

FLAGS = flags.FLAGS
FORMATS = ("tf1", "model_garden", "hf", "keras", "bert_tf")  # checkpoints.FORMATS

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


def define_flags(flag_values=FLAGS) -> None:
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("from", None, "Input: checkpoint prefix, .safetensors or .keras file, a "
                      "Hugging Face model folder, or a run's --output_dir (its latest "
                      "checkpoint).", **fv)
  flags.DEFINE_string("to", None, "Output: checkpoint prefix, .safetensors (a Hugging Face "
                      "folder: name it <folder>/model.safetensors) or .keras file.", **fv)
  flags.DEFINE_enum("from_format", None, list(FORMATS), "Input format (default: detected).",
                    **fv)
  flags.DEFINE_enum("to_format", None, ["tf1", "hf", "keras"], "Output format (default: from "
                    "the --to name: .safetensors -> hf, .keras -> keras, else tf1).", **fv)
  flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model (default: the "
                      "one beside the input).", **fv)
  flags.DEFINE_string("vocab_file", None, "hf output: the vocab written beside it, a file or a "
                      "folder holding vocab.txt (default: the vocab.txt beside the input).", **fv)
  flags.DEFINE_bool("do_lower_case", None, "hf output: the casing written to "
                    "tokenizer_config.json (default: what the input's folder records in "
                    "task_info.json, data_metadata.json or tokenizer_config.json).", **fv)
  flags.DEFINE_bool("drop_head", False, "Convert the encoder alone, without the input's head "
                    "(pretraining or fine-tuned). Without it, a head the output cannot hold "
                    "is refused.", **fv)
  flags.DEFINE_bool("overwrite", False, "Replace existing outputs: the --to file(s) and the "
                    "files written beside them (config, task_info.json, tokenizer files).", **fv)
  flags.mark_flags_as_required(["from", "to"], **fv)


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
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model import conversion  # pylint: disable=g-import-not-at-top
  if step == "outputs":
    if isinstance(error, IsADirectoryError):
      return cli.UsageError(f"--to={_text(error)}")
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
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  source = path
  if io.isdir(path):
    try:
      source = checkpoints.resolve_checkpoint(path)
    except FileNotFoundError as e:
      raise FileNotFoundError(f"--from={_text(e)}") from None
  kind = _kind(source)
  if kind == "missing":
    if source.endswith((".safetensors", ".keras")) or from_format in ("hf", "keras"):
      raise FileNotFoundError(f"--from={path}: file not found")
    raise FileNotFoundError(f"--from={path}: not found (no such file, and no checkpoint "
                            f"{source}.index)")
  for part in checkpoints.TF_CHECKPOINT_PARTS:
    if source.endswith(part) and io.exists(source[:-len(part)] + ".index"):
      raise cli.UsageError(f"--from={path}: pass the checkpoint prefix "
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
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
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
      raise cli.UsageError(f"--from={source}: no {name} beside it; pass --bert_config_file")
  try:
    return checkpoints.config_beside(source, source_format)
  except Exception as e:  # pylint: disable=broad-except
    raise _read_error(source, source_format, e) from e


def resolve_tokenizer(source: str, config, vocab_file: Optional[str],
                      do_lower_case: Optional[bool]):
  """The tokenizer written beside an hf output: --vocab_file (default: the vocab.txt beside
  --from, which run_pretraining, Hugging Face and the original's releases record) and
  --do_lower_case (default: what --from's folder records), checked against what the model was
  trained with and against the config's vocab_size (provenance.check_tokenizer)."""
  from bert_tf.model import conversion  # pylint: disable=g-import-not-at-top
  from bert_tf.model import provenance  # pylint: disable=g-import-not-at-top
  casing = do_lower_case if do_lower_case is not None else \
      provenance.recorded_tokenizer(source).get("do_lower_case")
  try:
    tokenizer = conversion.hf_tokenizer(source, vocab_file, casing,
                                         names=("--vocab_file", "--do_lower_case"))
  except FileNotFoundError:
    if vocab_file:
      raise
    raise cli.UsageError(f"--from={source}: no vocab.txt beside it; pass --vocab_file (a Hugging "
                         "Face model folder holds its tokenizer's vocab)") from None
  except ValueError:
    raise cli.UsageError(
        f"--from={source}: nothing beside it records the casing of its vocab (task_info.json, "
        "data_metadata.json, tokenizer_config.json); pass --do_lower_case=true (uncased) or "
        "false (cased) for the output's tokenizer_config.json") from None
  provenance.check_tokenizer(tokenizer.vocab_file, tokenizer.do_lower_case, checkpoints=[source],
                             vocab_size=config.vocab_size, override_flag=None)
  return tokenizer


def main(argv):
  del argv
  from bert_tf.model import conversion  # pylint: disable=g-import-not-at-top
  target = FLAGS.to
  target_format = conversion.target_format_of(target, FLAGS.to_format)
  if target.endswith("/") or io.isdir(target):  # a usage error, before the rest
    try:
      conversion.check_conversion_outputs(target, target_format, FLAGS.overwrite)
    except IsADirectoryError as e:
      raise cli.UsageError(f"--to={_text(e)}") from None
  source, source_format = resolve_source(FLAGS["from"].value, FLAGS.from_format)
  config = read_config(FLAGS.bert_config_file, source, source_format)
  tokenizer = None
  if target_format == "hf":
    tokenizer = resolve_tokenizer(source, config, FLAGS.vocab_file, FLAGS.do_lower_case)
  errors = functools.partial(conversion_error, source, source_format, target,
                             FLAGS.bert_config_file)
  _, head, task_info = conversion.convert_resolved(
      source, source_format, config, target, target_format, FLAGS.overwrite, tokenizer,
      FLAGS.drop_head, errors)
  labels = (task_info or {}).get("labels")
  print(f"Wrote {target} ({target_format}, {config.num_hidden_layers} layers, hidden "
        f"{config.hidden_size}, {f'{head} head' if head else 'no head'}"
        f"{f' with labels {labels}' if labels else ''}) from {source} ({source_format})")


if __name__ == "__main__":
  cli.run(main, define_flags, "convert_checkpoint")
