"""SavedModels for TensorFlow Serving: raw text in, embeddings / fill-mask / next sentence out.

`saved_model.export_serving_models(...)` writes three models in the versioned layout TF Serving watches
(`<export_dir>/<name>/<version>/`, the highest integer version is served):

  <model_name>_encoder       token ids in, TF Hub BERT encoder conventions. Signature
                             serving_default: int32 input_word_ids, input_mask, input_type_ids
                             [B, S] (B and S dynamic) -> float32 pooled_output [B, H],
                             sequence_output [B, S, H], encoder_outputs [B, L, S, H] (layer axis
                             second, because TF Serving's row format needs the batch first).
  <model_name>_preprocessor  raw strings in, the encoder's three inputs out, tokenized in-graph
                             with the same ids as bert_tf.tokenization.FullTokenizer.
                               serving_default: text [B] -> packed to the export's seq_length.
                               preprocess: text, text_b, seq_length [B] -> each row packed to its
                                 own seq_length and padded to the batch's largest (an empty
                                 text_b means a single segment, as in the original).
  <model_name>               the text model users deploy:
                               serving_default: text [B] -> pooled_output, sequence_output,
                                 input_mask, tokens (the WordPiece token of every position).
                               encode: text, text_b, seq_length [B] -> the same outputs.
                               fill_mask: text [B] holding "[MASK]" -> per mask the top-k tokens
                                 and probabilities (rows without [MASK]: mask_count 0, padding).
                               next_sentence: text, text_b [B] -> probabilities [B, 2] of
                                 (IsNext, NotNext), the original's label order.
                             fill_mask and next_sentence need the checkpoint's pretraining heads;
                             an encoder-only checkpoint gets serving_default and encode only.

Every version directory holds the vocab as a SavedModel asset (assets/vocab.txt, read by the
graph's id -> token table), bert_config.json and data_metadata.json (when known) beside it in
assets/, and warm-up requests in assets.extra/tf_serving_warmup_requests.

Packing follows the original's convert_single_example: [CLS] A [SEP] for one text,
[CLS] A [SEP] B [SEP] for two; a pair over the budget (seq_length - 3) loses tokens from the end
of the longer segment one at a time (B when they tie), a single text keeps its first
seq_length - 2 tokens. Invalid UTF-8 bytes are dropped (like the original's
decode("utf-8", "ignore")), never an error.

serving/pretrained.py builds what an export of pretrained weights holds (pretraining_exports:
these three models and the plain SavedModels of serving/saved_model.py) and each task package
its fine-tuned model's module (export_task_module); this module
stages the vocab they carry and writes them: save_exports, the one writer of every export of the
package, saves a list of modules.Export at one version.

Every op in the exports is a core TensorFlow op or a tensorflow-text op (tests check this), so
the stock tensorflow/serving binary, which links tensorflow-text's ops, serves them; loading them
in Python needs `import tensorflow_text` and nothing of bert_tf.
"""

import contextlib
import json
import os
import re
import shutil
import tempfile
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf import length_buckets as length_buckets_lib
from bert_tf import record_schema
from bert_tf.config import BertConfig
from bert_tf.packing import Packer
from bert_tf.serving.modules import Export, current_inference_options
from bert_tf.serving.pretrained import check_seq_length

DEFAULT_SEQ_LENGTH = 128
DEFAULT_TOP_K = 5
WARMUP_FILE = "tf_serving_warmup_requests"


# === Warm-up records ===
# TF Serving replays assets.extra/tf_serving_warmup_requests (a TFRecord file of PredictionLog
# protos) when it loads a version. tensorflow-serving-api, which defines those protos, pins a
# TensorFlow version (2.21 for its newest release), so the records are encoded here directly from
# the field numbers of tensorflow_serving/apis/{prediction_log,predict,model}.proto:
#   PredictionLog.predict_log = 6; PredictLog.request = 1;
#   PredictRequest.model_spec = 1, PredictRequest.inputs = 2 (map<string, TensorProto>);
#   ModelSpec.name = 1, ModelSpec.signature_name = 3; a map entry is {key = 1, value = 2}.


def prediction_log(model_name: str, signature_name: str,
                   inputs: Mapping[str, np.ndarray]) -> bytes:
  """A serialized tensorflow.serving.PredictionLog holding one PredictRequest."""
  field = record_schema.length_delimited
  spec = field(1, model_name.encode("utf-8")) + field(3, signature_name.encode("utf-8"))
  request = field(1, spec)
  for key in sorted(inputs):
    tensor = tf.make_tensor_proto(inputs[key]).SerializeToString(deterministic=True)
    request += field(2, field(1, key.encode("utf-8")) + field(2, tensor))
  return field(6, field(1, request))


def warmup_records(model_name: str, requests: Sequence[tuple]) -> list:
  """The records of assets.extra/tf_serving_warmup_requests: one serialized PredictionLog per
  (signature name, inputs) request, each batch of several rows preceded by its first row
  alone: a lone request runs the unpacked graph and a batch the packed one
  (modules.run_inference), so both are warm before the first real request."""
  records = []
  for signature_name, inputs in requests:
    rows = min((len(value) for value in inputs.values()), default=0)
    if rows > 1:
      records.append(prediction_log(model_name, signature_name,
                                    {key: value[:1] for key, value in inputs.items()}))
    records.append(prediction_log(model_name, signature_name, inputs))
  return records


# === Writing ===


def next_version(model_dir: str) -> int:
  """1 + the largest integer version under model_dir (1 when there is none)."""
  versions = [int(n) for n in io.listdir(model_dir) if re.fullmatch(r"\d+", n)]
  return max(versions, default=0) + 1


_TEMP_ENTRY = re.compile(r"(.+)" + re.escape(io.TEMP_MARKER) + r"\d+")


def remove_stale_exports(directory: str) -> list:
  """Deletes what killed exports left in `directory`: `<name>.incomplete-<pid>` entries (a
  version or SavedModel being written) whose process is gone, as data prep's commit journal
  is rolled back by the next run. A live process's (another export running now) are kept, as
  are leftovers on filesystems that cannot tell (their names say they are incomplete).

  Returns:
    The paths deleted.
  """
  names = sorted({m.group(1) for m in map(_TEMP_ENTRY.match, io.listdir(directory)) if m})
  removed = [path for name in names for path in io.remove_stale_temp_files(
      io.join(directory, name))]
  if removed:
    logging.warning("Removed what interrupted exports left: %s", ", ".join(removed))
  return removed


def save_exports(exports: Sequence[Export], export_dir: str,
                 version: Optional[int] = None) -> Dict[str, str]:
  """Writes every export (modules.Export) to <export_dir>/<its name>/<version>/.

  Args:
    exports: what to write, in order.
    export_dir: the model base directory.
    version: the version of them all; default: one more than the largest of any of them.

  Returns:
    {export name: its version directory}.
  """
  model_dirs = [os.path.join(export_dir, export.name) for export in exports]
  if version is None:
    version = max(next_version(model_dir) for model_dir in model_dirs)
  return {export.name: _save_version(export.module, export.signatures, model_dir, version,
                                     export.files, export.warmup, export.name,
                                     replace=export.replace)
          for export, model_dir in zip(exports, model_dirs)}


def _save_version(module: tf.Module, signatures: Mapping[str, Any], model_dir: str,
                  version: int, extra_files: Mapping[str, str], warmup: Sequence[tuple],
                  model_name: str, replace: bool = False) -> str:
  """Saves `module` as model_dir/version, written under a temporary name and renamed; an
  existing version is an error, or with `replace` replaced."""
  final = os.path.join(model_dir, str(version))
  records = warmup_records(model_name, warmup)
  remove_stale_exports(model_dir)
  if io.exists(final) and not replace:
    raise FileExistsError(f"{final} already exists; TF Serving versions are immutable, so "
                          "choose another --version (or leave it unset for the next one)")
  # TF Serving watches model_dir: a version appears under its number only when complete.
  with io.atomic_path(final, overwrite=replace) as tmp:
    tf.saved_model.save(module, tmp, signatures=dict(signatures))
    io.makedirs(os.path.join(tmp, "assets"))  # none yet when the module has no asset
    for name, text in extra_files.items():
      io.write_text(os.path.join(tmp, "assets", name), text)
    if records:
      io.write_records(os.path.join(tmp, "assets.extra", WARMUP_FILE), records)
    if not replace:  # a TF Serving model (the plain SavedModels are replaced, not served)
      io.makedirs(os.path.join(tmp, "assets.extra"))
      io.write_text(os.path.join(tmp, "assets.extra", BATCHING_FILE), BATCHING_PARAMETERS)
  return final


# TF Serving's server-side batching (--enable_batching --batching_parameters_file=<this file>):
# concurrent requests to a model are merged into one batch of at most max_batch_size texts,
# which the signatures then pack several to a row. The values (each export writes them to
# assets.extra/batching_parameters.txt; benchmarks/README.md has the measurements):
# - max_batch_size 32: examples per second grow little past a batch of 32 short texts, while
#   the batch's latency keeps growing with its size;
# - batch_timeout_micros 2000: a lone request waits at most 2 ms for company, a fraction of
#   what answering it costs on a CPU core;
# - num_batch_threads: batches computed at once; 1 leaves every core to one batch's ops (set
#   the server's --tensorflow_intra_op_parallelism to the cores), raise it with the cores;
# - no allowed_batch_sizes: the server would pad a batch with copies of its requests, which
#   the graph would then compute; packing already bounds the shapes the graph meets.
BATCHING_FILE = "batching_parameters.txt"
BATCHING_PARAMETERS = """\
max_batch_size { value: 32 }
batch_timeout_micros { value: 2000 }
num_batch_threads { value: 1 }
max_enqueued_batches { value: 256 }
"""


def check_version(version: Optional[int]) -> None:
  if version is not None and version < 1:
    raise ValueError(f"version must be a positive integer, got {version}")


# Staging folders are named <prefix><pid>_<random>, so that the next export can tell the ones
# a killed export left.
_STAGING_PREFIX = "bert_tf_export_"
_STAGING_NAME = re.compile(re.escape(_STAGING_PREFIX) + r"(\d+)_")


def _remove_stale_staging() -> None:
  """Deletes the staging folders of exports whose process is gone (killed mid-export)."""
  folder = tempfile.gettempdir()
  for name in io.listdir(folder):
    match = _STAGING_NAME.match(name)
    if not match or int(match.group(1)) == os.getpid():
      continue
    try:
      os.kill(int(match.group(1)), 0)
      continue  # alive, or not ours to signal: maybe an export running now
    except ProcessLookupError:
      pass
    except PermissionError:
      continue
    shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
    logging.info("Removed the staging folder of an interrupted export: %s",
                 os.path.join(folder, name))


@contextlib.contextmanager
def staged_vocab(vocab_file: str):
  """A local copy of the vocab named vocab.txt, removed afterwards.

  Assets keep their file's base name: the copy gives every export the same asset name, whatever
  the input vocab was called (and reads gs:// vocabs once).
  """
  if not tf.io.gfile.exists(vocab_file):
    raise FileNotFoundError(f"vocab file not found: {vocab_file}")
  _remove_stale_staging()
  staging = tempfile.mkdtemp(prefix=f"{_STAGING_PREFIX}{os.getpid()}_")
  try:
    local_vocab = os.path.join(staging, "vocab.txt")
    tf.io.gfile.copy(vocab_file, local_vocab)
    try:
      yield local_vocab
    except ValueError as e:
      # Messages name the file the user gave, not the staging copy.
      if local_vocab not in str(e):
        raise
      raise ValueError(str(e).replace(local_vocab, vocab_file)) from None
  finally:
    shutil.rmtree(staging, ignore_errors=True)


# === Fine-tuned models ===


def export_task_module(make_module: Callable[[Packer], tf.Module], config: BertConfig,
                       vocab_file: str, export_dir: str, *, do_lower_case: bool,
                       seq_length: int, version: Optional[int], model_name: str,
                       info: Mapping[str, Any], task_info: Optional[Mapping[str, Any]],
                       warmup_inputs: Callable[[str], Mapping[str, np.ndarray]],
                       warmup: bool = True,
                       length_buckets: Optional[str] = length_buckets_lib.AUTO) -> str:
  """What every fine-tuned raw-text export shares: checks, the vocab asset, the files beside
  the graph and the versioned save.

  Size: thirteen parameters, what every task's export passes on, one each.

  Args:
    make_module: builds the signature module from the export's Packer (its tokenizer reads the
      vocab asset); the module has `signature_functions`.
    config, vocab_file, export_dir, do_lower_case, seq_length, version, model_name, task_info,
      warmup: as the export functions' arguments.
    info: the export's own settings for assets/export_info.json (seq_length, do_lower_case,
      model_name and the signatures are added).
    warmup_inputs: signature name -> the inputs of its warm-up request.
    length_buckets: --length_buckets (see saved_model.export_serving_models).

  Returns:
    The version directory written.
  """
  check_seq_length(seq_length, config)
  check_version(version)
  with staged_vocab(vocab_file) as local_vocab:
    buckets = length_buckets_lib.parse(length_buckets, seq_length)
    packer = Packer(local_vocab, do_lower_case, config.max_position_embeddings,
                    length_buckets=buckets)
    if packer.tokenizer.vocab_size > config.vocab_size:
      raise ValueError(f"vocab file {vocab_file} has {packer.tokenizer.vocab_size} tokens, more "
                       f"than the config's vocab_size {config.vocab_size}")
    module = make_module(packer)
    module.vocab_file = tf.saved_model.Asset(local_vocab)
    signatures = module.signature_functions
    info = dict(info, seq_length=int(seq_length), do_lower_case=bool(do_lower_case),
                model_name=model_name, signatures=sorted(signatures),
                **current_inference_options().info(),
                length_buckets=None if buckets is None else list(buckets))
    files = {"bert_config.json": config.to_json_string(),
             "export_info.json": json.dumps(info, indent=2, sort_keys=True) + "\n"}
    if task_info is not None:
      files["task_info.json"] = json.dumps(dict(task_info), indent=2) + "\n"
    warm = [(name, warmup_inputs(name)) for name in signatures] if warmup else ()
    export = Export(info.get("kind", model_name), model_name, module, signatures, files, warm)
    return save_exports([export], export_dir, version)[model_name]
