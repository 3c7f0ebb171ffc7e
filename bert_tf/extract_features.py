r"""Extracts fixed BERT features (hidden states of chosen layers): the original extract_features.py.

  echo 'Who was Jim Henson ? ||| Jim Henson was a puppeteer' > /tmp/input.txt
  python -m bert_tf.extract_features --input_file=/tmp/input.txt \
      --output_file=/tmp/output.jsonl --vocab_file=$BERT/vocab.txt \
      --bert_config_file=$BERT/bert_config.json --init_checkpoint=$BERT/bert_model.ckpt \
      --layers=-1,-2,-3,-4 --max_seq_length=128 --batch_size=8

One example per line ("text_a ||| text_b" for a pair). Writes the original's JSON lines
(--output_format=jsonl), or compact npz / tfrecord files of float32 values; --pooling=cls|mean
writes one vector per line and layer instead of one per token. The input is streamed: memory
stays flat on any number of lines, and the output appears (renamed from a temporary name) only
when complete.
"""

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS


def define_flags(flag_values=FLAGS) -> None:
  fv = dict(flag_values=flag_values)
  # === The original's flags ===
  flags.DEFINE_string("input_file", None, "Text file, one example per line; \"A ||| B\" is a "
                      "pair (split at the last \" ||| \").", **fv)
  flags.DEFINE_string("output_file", None, "Where the features go (written under a temporary "
                      "name, renamed when complete).", **fv)
  flags.DEFINE_string("layers", "-1,-2,-3,-4", "Comma-separated indexes of the transformer "
                      "layers to output (-1 = the last, 0 = the first).", **fv)
  cli.define_model_flags(flag_values, init_checkpoint_help=(
      "The weights: any format the converters read (original TF1, Model Garden, Hugging Face "
      ".safetensors, .keras, a run_pretraining / run_classifier / run_squad output_dir)."))
  flags.DEFINE_integer("batch_size", 32, "Batch size for predictions.", **fv)
  cli.define_tpu_flags(flag_values)
  flags.DEFINE_bool("use_one_hot_embeddings", False, "Accepted for compatibility; no effect "
                    "(the embedding lookup is a gather on every device).", **fv)
  # === Additions ===
  flags.DEFINE_enum("output_format", None, ["jsonl", "npz", "tfrecord"],
                    "jsonl: the original's JSON lines; npz: numpy arrays (tokens of all lines "
                    "concatenated, with offsets); tfrecord: one tf.train.Example per line. "
                    "Default: from --output_file's extension (.npz, .tfrecord/.tf_record), "
                    "else jsonl.", **fv)
  flags.DEFINE_enum("pooling", "none", ["none", "cls", "mean"],
                    "none: one vector per token (the original); cls: the [CLS] vector; mean: "
                    "the mean over the real tokens, [CLS] and [SEP] included.", **fv)
  cli.define_device_flags(flag_values, what="the forward pass")
  cli.define_length_flags(flag_values)
  # Not cli.define_packing_flag: there is no static mode here (every batch is --batch_size
  # lines; exact's row ladder already bounds the shapes), and its help speaks of training steps.
  # Default none: the original's computation exactly, so the JSON's rounded values are the
  # original's to the last digit (packed rows agree to float32 rounding, not bit for bit).
  flags.DEFINE_enum("packing", "none", ["none", "exact"],
                    "none: one line per row of the batch. exact: the --batch_size lines of each "
                    "batch share rows (attention within a line, positions restarting at its "
                    "[CLS]), packed into the fewest rows of a --length_buckets width; the "
                    "outputs are moved back to each line's tokens, so the files hold the same "
                    "values (to float32 rounding) for less computed padding. The share of "
                    "real tokens among the computed positions is logged at the end.", **fv)
  flags.DEFINE_bool("allow_tokenizer_mismatch", False,
                    "Go on (with a warning) when --vocab_file or --do_lower_case contradicts "
                    "what the checkpoint was trained with.", **fv)
  flags.DEFINE_bool("overwrite", False, "Replace an existing --output_file (else refused).",
                    **fv)
  flags.DEFINE_float("log_every_seconds", 30.0, "How often progress (lines/s, ETA) is logged.",
                     **fv)
  flags.mark_flags_as_required(["input_file", "output_file", "vocab_file", "init_checkpoint"],
                               **fv)


def main(argv):
  del argv
  # Imported here so that --help does not pay for TensorFlow.
  from absl import logging  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.features import run as features_run  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_tf.tasks.features import settings as features_settings
  f = FLAGS
  cli.apply_runtime_flags(f)
  settings = cli.settings_from_flags(features_settings.ExtractFeaturesSettings, f)
  config = cli.config_from_flags(f)
  try:  # impossible flag values are usage errors (exit 2), found before any work
    settings.check()
    features_settings.layers_for_config(settings, config)
  except features_settings.FeatureExtractionError as e:
    raise cli.UsageError(str(e)) from None
  if f.use_one_hot_embeddings:
    logging.info("--use_one_hot_embeddings has no effect here")
  strategy = cli.select_strategy_from_flags(f)
  result = features_run.extract_features(settings, config, strategy)
  logging.info("Wrote %d lines to %s (%.1f lines/s)", result["num_lines"],
               result["output_file"], result["lines_per_second"])


if __name__ == "__main__":
  cli.run(main, define_flags, "extract_features")
