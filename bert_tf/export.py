"""Exports a checkpoint as TF Serving models (raw text in): python -m bert_tf.export.

  python -m bert_tf.export --checkpoint=run/ --export_dir=/models

Writes the text model, <model_name>_encoder and <model_name>_preprocessor in TF Serving's
versioned layout (see bert_tf/serving/tf_serving.py). The checkpoint may be one of our training
checkpoints (file prefix or run directory), an original TF1 checkpoint, a Model Garden
checkpoint, Hugging Face .safetensors or a .keras model. The tokenizer is the one the checkpoint's
folder records (its vocab.txt and casing: bert_tf.model.provenance) unless --vocab_file and
--do_lower_case say otherwise, and is checked against every record of it.
"""

import json

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
DEFAULT_SEQ_LENGTH = 128
DEFAULT_TOP_K = 5


def define_flags(flag_values=FLAGS) -> None:
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("bert_config_file", None,
                      "bert_config.json of the model (default: the one beside --checkpoint).",
                      **fv)
  flags.DEFINE_string("checkpoint", None,
                      "Weights: one of our training checkpoints (prefix or directory), an "
                      "original TF1 checkpoint, a Model Garden checkpoint, Hugging Face "
                      ".safetensors or a .keras model.", **fv)
  flags.DEFINE_string("vocab_file", None,
                      "The WordPiece vocab the model was trained with (a file, or a folder "
                      "holding vocab.txt; default: the vocab.txt beside --checkpoint, which "
                      "run_pretraining, Hugging Face and the original's releases record).", **fv)
  flags.DEFINE_string("export_dir", None,
                      "Model base directory: writes <export_dir>/<name>/<version>/ for the "
                      "text model, <name>_encoder and <name>_preprocessor.", **fv)
  flags.DEFINE_bool("do_lower_case", None,
                    "Lower-case and strip accents (match training; default: what the data's "
                    "metadata or the checkpoint's folder records, else true).", **fv)
  flags.DEFINE_integer("seq_length", DEFAULT_SEQ_LENGTH,
                       "Packed length of the fixed-length signatures (the 'encode' and "
                       "'preprocess' signatures take a seq_length input instead).", **fv)
  flags.DEFINE_integer("top_k", DEFAULT_TOP_K, "Tokens returned per [MASK] by fill_mask.", **fv)
  flags.DEFINE_integer("version", None,
                       "Version directory number (default: one more than the largest there).",
                       **fv)
  flags.DEFINE_string("model_name", "bert", "Name of the text model directory.", **fv)
  flags.DEFINE_string("data_metadata_file", None,
                      "The training data's .metadata.json, copied into the exports.", **fv)
  flags.DEFINE_bool("warmup", True, "Write assets.extra/tf_serving_warmup_requests.", **fv)
  flags.DEFINE_bool("allow_tokenizer_mismatch", False,
                    "Export even when --vocab_file or --do_lower_case contradict what the "
                    "checkpoint or the data (--data_metadata_file) were made with; logged as a "
                    "warning.", **fv)
  cli.define_serving_flags(flag_values)
  cli.define_length_flags(flag_values)
  flags.mark_flags_as_required(["checkpoint", "export_dir"], **fv)


def main(argv):
  """Flags -> config and weights -> export_serving_models."""
  del argv
  from bert_tf import io  # pylint: disable=g-import-not-at-top
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import modules  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import saved_model  # pylint: disable=g-import-not-at-top
  f = FLAGS
  if f.bert_config_file:
    config = BertConfig.from_json_file(f.bert_config_file)
  else:  # bert_config.json beside it, or a Hugging Face folder's config.json
    try:
      config = checkpoints.config_beside(checkpoints.resolve_checkpoint(f.checkpoint))
    except FileNotFoundError as e:
      raise cli.UsageError(f"--checkpoint={f.checkpoint}: {e} (--bert_config_file not "
                           "given)") from None
  try:
    weights = checkpoints.read_weights(f.checkpoint, config)
  except Exception as e:  # pylint: disable=broad-except
    if not isinstance(e, cli.failure_types()):
      raise
    raise ValueError(f"--checkpoint={f.checkpoint}: {e}") from None
  metadata = None
  if f.data_metadata_file:
    try:
      metadata = json.loads(io.read_text(f.data_metadata_file))
    except json.JSONDecodeError as e:
      raise ValueError(f"--data_metadata_file={f.data_metadata_file}: not JSON ({e})") from None
  vocab_file, do_lower_case = _tokenizer(f, config, metadata)
  # One export at a time per export_dir: two would pick the same next version.
  options = modules.InferenceOptions(f.serving_precision, f.pack_requests)
  with io.directory_lock(f.export_dir, "export"), modules.inference_options(options):
    paths = saved_model.export_serving_models(
        config, weights, vocab_file, f.export_dir, do_lower_case=do_lower_case,
        seq_length=f.seq_length, top_k=f.top_k, version=f.version, model_name=f.model_name,
        data_metadata=metadata, warmup=f.warmup, length_buckets=f.length_buckets)
  for kind, path in paths.items():
    print(f"{kind}: {path}")


def _tokenizer(f, config, metadata):
  """(vocab file, casing) of the exports: the flags', else what the data's metadata and the
  checkpoint's folder record (provenance), checked against every record (the served tokenizer
  must be the training one)."""
  from bert_tf.model import provenance  # pylint: disable=g-import-not-at-top
  vocab_file = provenance.resolve_vocab_file(f.vocab_file) or \
      provenance.recorded_vocab(f.checkpoint)
  if vocab_file is None:
    raise cli.UsageError(f"--vocab_file not given and no {provenance.VOCAB_FILE} beside "
                         f"--checkpoint={f.checkpoint}")
  do_lower_case = f.do_lower_case
  if do_lower_case is None:
    do_lower_case = (metadata or {}).get("do_lower_case")
  if do_lower_case is None:
    do_lower_case = provenance.recorded_tokenizer(f.checkpoint).get("do_lower_case", True)
  provenance.check_tokenizer(
      vocab_file, bool(do_lower_case), checkpoints=[f.checkpoint], data_metadata=metadata,
      data_source=f"--data_metadata_file={f.data_metadata_file}", vocab_size=config.vocab_size,
      allow_mismatch=f.allow_tokenizer_mismatch)
  return vocab_file, bool(do_lower_case)


if __name__ == "__main__":
  cli.run(main, define_flags, "export")
