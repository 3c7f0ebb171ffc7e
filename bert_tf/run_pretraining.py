"""Pretrains BERT (masked LM + next sentence) on TFRecords: python -m bert_tf.run_pretraining.

Takes the original run_pretraining.py's flags, with the same names and defaults, plus the
options of this reimplementation (strategy, optimizer, precision, accumulation, ...).
Flags -> BertConfig + PretrainingSettings -> training.pretraining.run_pretraining, with
serving.saved_model.EXPORTER as its export (bert_tf.model.exporting).
"""

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS


def define_flags(flag_values=FLAGS) -> None:
  fv = dict(flag_values=flag_values)
  # === The original's flags ===
  cli.define_model_flags(
      flag_values, do_lower_case=None, max_seq_length=128,
      vocab_help="The vocab (optional): copied beside exports, needed by --dynamic_masking.",
      init_checkpoint_help=(
          "Initial weights (ours, an original TF1 checkpoint, a Model Garden checkpoint, "
          "Hugging Face .safetensors or a .keras model). Weights only; ignored when output_dir "
          "holds a checkpoint to resume from."))
  flags.DEFINE_string("input_file", None,
                      "Input TFRecord files (comma-separated paths and globs).", **fv)
  flags.DEFINE_string("output_dir", None,
                      "Where checkpoints, summaries, eval_results.txt and exports are written. "
                      "A run resumes from the latest checkpoint found here.", **fv)
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Maximum masked LM predictions per sequence; must match the data.", **fv)
  flags.DEFINE_bool("do_train", False, "Whether to train.", **fv)
  flags.DEFINE_bool("do_eval", False, "Whether to evaluate (after training, if training).", **fv)
  cli.define_batch_flags(flag_values, train_batch_size=32, eval_batch_size=8,
                         learning_rate=5e-5)
  flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps (updates).", **fv)
  flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warmup steps.", **fv)
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save a checkpoint.", **fv)
  flags.DEFINE_integer("iterations_per_loop", 1000,
                       "Steps between log lines, and at most that many per tf.function call "
                       "(calls are cut to BERT_TF_STOP_CHECK_SECONDS, default 5, so that "
                       "SIGTERM saves the step reached soon).", **fv)
  flags.DEFINE_integer("max_eval_steps", 100, "Number of eval batches.", **fv)
  flags.DEFINE_integer("eval_every_n_steps", 0,
                       "With --do_train, also evaluate every this many steps (--max_eval_steps "
                       "batches of the eval data, the same ones each time), off the training "
                       "clock: a log line and TensorBoard summaries in output_dir/eval "
                       "(tensorboard --logdir=output_dir). 0: only at the end, with --do_eval.",
                       **fv)
  cli.define_tpu_flags(flag_values)
  # === Additions ===
  cli.define_runtime_flags(flag_values)
  flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"],
                    "adamw: the original AdamWeightDecay; lamb: LAMB for large batches.", **fv)
  cli.define_bias_correction_flag(flag_values)
  flags.DEFINE_string("eval_input_file", None,
                      "Eval TFRecords. Default: --input_file (the original evaluated on its "
                      "training data).", **fv)
  flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept in output_dir.", **fv)
  cli.define_packing_flag(flag_values, pretraining=True)
  flags.DEFINE_integer("cpu_towers", 1,
                       "Training on CPUs only: split each replica's batch into this many "
                       "towers computed side by side, each op on one thread (TensorFlow's "
                       "intra-op threads become 1, its inter-op threads this number). The "
                       "update is the same; on a CPU of N cores N is usually faster than 1, "
                       "which runs each op on all cores. 1: one batch.", **fv)
  flags.DEFINE_bool("dynamic_masking", False,
                    "Re-mask every batch on the fly (RoBERTa-style) from the same records; "
                    "needs --vocab_file.", **fv)
  flags.DEFINE_bool("export_at_end", True,
                    "Export the encoder and pretraining SavedModels to output_dir/export/"
                    "{encoder,pretraining}/<step>/ at the end of training.", **fv)
  flags.DEFINE_bool("export_every_checkpoint", False, "Also export at every checkpoint.", **fv)
  flags.DEFINE_bool("export_serving", True,
                    "With --vocab_file, exports also include the TF Serving models (raw text "
                    "in) at export/{bert,bert_encoder,bert_preprocessor}/<step>/; see python -m "
                    "bert_tf.export.", **fv)
  flags.DEFINE_bool("allow_tokenizer_mismatch", False,
                    "Run even when --vocab_file is not the vocab the data was made with (its md5 "
                    "differs from the data's metadata); logged as a warning.", **fv)
  _define_distillation_flags(flag_values)
  flags.mark_flags_as_required(["bert_config_file", "input_file", "output_dir"], **fv)


def _define_distillation_flags(flag_values) -> None:
  """Pretraining distillation (--teacher and its weights) and --init_layers."""
  from bert_tf.training import distillation  # pylint: disable=g-import-not-at-top
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string(
      "teacher", None, "Distil from this pretrained model with its masked-LM head (one of our "
      "run_pretraining folders, an original release's checkpoint, a Hugging Face "
      "BertForPreTraining folder), of the data's vocab and casing. The run's model (the "
      "student) learns from the masked-LM labels, the teacher's masked-LM distribution and "
      "the cosine of their last hidden states at the masked positions (DistilBERT's triple "
      "loss), plus next sentence as usual; the teacher runs frozen in the training step, and "
      "with --do_eval its eval results are computed first (teacher_* in eval_results.txt).",
      **fv)
  flags.DEFINE_float(
      "distill_alpha", distillation.DEFAULT_ALPHA, "With --teacher: the weight of the masked "
      "LM on the labels; the teacher's soft masked LM weighs 1 - alpha.", **fv)
  flags.DEFINE_float(
      "distill_temperature", distillation.DEFAULT_TEMPERATURE, "With --teacher: the softmax "
      "temperature T of the soft masked LM, which is scaled by T^2.", **fv)
  flags.DEFINE_float(
      "distill_cosine_weight", None, "With --teacher: the weight of 1 - cos(student, teacher) "
      "of the last hidden states at the masked positions. Default: 1 when the teacher's "
      "hidden size is the student's, else 0 (it needs one width).", **fv)
  flags.DEFINE_string(
      "init_layers", "even", "Which encoder layers of an --init_checkpoint deeper than the "
      "model it takes: even (evenly spaced from the first to the last, as DistilBERT), first, "
      "or the checkpoint's layer numbers from 0 (e.g. 0,3,5). Logged.", **fv)


def main(argv):
  del argv
  # Imported here so that --help does not pay for TensorFlow.
  from absl import logging  # pylint: disable=g-import-not-at-top
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import saved_model  # pylint: disable=g-import-not-at-top
  from bert_tf.training import distribution  # pylint: disable=g-import-not-at-top
  from bert_tf.training.errors import TrainingError  # pylint: disable=g-import-not-at-top
  from bert_tf.training import pretraining  # pylint: disable=g-import-not-at-top
  # Before TensorFlow runs anything: its threads cannot change afterwards.
  distribution.use_cpu_towers(FLAGS.cpu_towers)
  cli.apply_runtime_flags(FLAGS)
  config = BertConfig.from_json_file(FLAGS.bert_config_file)
  settings = cli.settings_from_flags(pretraining.PretrainingSettings, FLAGS)
  # Impossible flag values are usage errors (exit 2), found at once: before a multi-worker run
  # waits for its cluster (the replica count's own checks come with the strategy).
  try:
    settings.check()
  except TrainingError as e:
    raise cli.UsageError(str(e)) from None
  strategy = cli.select_strategy_from_flags(FLAGS)
  result = pretraining.run_pretraining(config, settings, strategy,
                                       exporter=saved_model.EXPORTER)
  logging.info("Finished at step %d", result["global_step"])
  if "export_dir" in result:
    logging.info("Exported models: %s", result["export_dir"])


if __name__ == "__main__":
  cli.run(main, define_flags, "run_pretraining")
