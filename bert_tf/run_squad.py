r"""Fine-tunes BERT for extractive question answering: the original run_squad.py.

  python -m bert_tf.run_squad --do_train --do_predict \
      --vocab_file=$BERT/vocab.txt --bert_config_file=$BERT/bert_config.json \
      --init_checkpoint=$BERT/bert_model.ckpt --train_file=$SQUAD/train-v1.1.json \
      --predict_file=$SQUAD/dev-v1.1.json --train_batch_size=12 --learning_rate=3e-5 \
      --num_train_epochs=2.0 --max_seq_length=384 --doc_stride=128 --output_dir=/tmp/squad

SQuAD 2.0: add --version_2_with_negative (and --null_score_diff_threshold=auto to take the
threshold with the best F1 on the predict file).

Writes to output_dir: train.tf_record and eval.tf_record (the original's records),
checkpoints, predictions.json, nbest_predictions.json, null_odds.json (SQuAD 2.0), as the
original; eval_results.json (the official SQuAD scores, when the predict file has answers);
task_info.json; and after training a raw-text question-answering model for TF Serving under
export/squad/<step>/.
"""

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS


def define_flags(flag_values=FLAGS) -> None:
  fv = dict(flag_values=flag_values)
  # === The original's flags ===
  flags.DEFINE_string("output_dir", None, "Where records, checkpoints and predictions go.",
                      **fv)
  flags.DEFINE_string("train_file", None, "SQuAD json for training, e.g. train-v1.1.json.",
                      **fv)
  flags.DEFINE_string("predict_file", None, "SQuAD json for predictions, e.g. dev-v1.1.json "
                      "(scored with the official rules when it has answers).", **fv)
  cli.define_model_flags(flag_values, max_seq_length=384, do_lower_case=None,
                         do_lower_case_help=cli.RECORDED_CASING_HELP, init_checkpoint_help=(
      "Initial weights: a pretrained or fine-tuned checkpoint in any format the converters read "
      "(original TF1, Model Garden, Hugging Face .safetensors, a run_pretraining or run_squad "
      "output_dir)."))
  flags.DEFINE_integer("doc_stride", 128, "When splitting up a long document into chunks, how "
                       "much stride to take between chunks (the step between window starts).",
                       **fv)
  flags.DEFINE_integer("max_query_length", 64, "The maximum number of tokens for the question; "
                       "longer questions are truncated to this length.", **fv)
  flags.DEFINE_bool("do_train", False, "Whether to run training.", **fv)
  flags.DEFINE_bool("do_predict", False, "Whether to run eval on the dev set.", **fv)
  flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.", **fv)
  flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predictions.", **fv)
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.", **fv)
  cli.define_fine_tuning_flags(flag_values, export_help=(
      "After training, export a raw-text question-answering model for TF Serving to "
      "output_dir/export/squad/<step>/."))
  flags.DEFINE_integer("n_best_size", 20, "The total number of n-best predictions to generate "
                       "in the nbest_predictions.json output file.", **fv)
  flags.DEFINE_integer("max_answer_length", 30, "The maximum length of an answer, in "
                       "WordPiece tokens.", **fv)
  flags.DEFINE_bool("verbose_logging", False, "Log the answers whose text could not be mapped "
                    "back onto the context.", **fv)
  flags.DEFINE_bool("version_2_with_negative", False,
                    "SQuAD 2.0: some questions have no answer in their context.", **fv)
  flags.DEFINE_string("null_score_diff_threshold", "0.0",
                      "SQuAD 2.0: answer \"\" when null score - best non-null score > this "
                      "(negative: more \"\" answers). `auto`: the threshold with the best F1 on "
                      "the predict file's answers.", **fv)
  # === Additions ===
  flags.DEFINE_bool("steps_from_features", False,
                    "Count training steps from the windows (features) instead of the examples "
                    "as the original does (google-research/bert#662).", **fv)
  flags.DEFINE_string("transfer_file", None, "With --teacher: more training questions, a "
                      "SQuAD-format JSON (v1.1 or v2.0 layout) whose answers, when it has any, "
                      "are not read: every window of its questions trains on the teacher's "
                      "start and end logits only; the training file is always part of the "
                      "data, and the steps count its questions too.", **fv)
  flags.mark_flags_as_required(["vocab_file", "output_dir"], **fv)


def parse_threshold(value: str):
  """--null_score_diff_threshold: a number, or "auto" (None)."""
  text = (value or "").strip().lower()
  if text == "auto":
    return None
  try:
    return float(text)
  except ValueError:
    raise cli.UsageError(f"--null_score_diff_threshold must be a number or `auto`, got "
                         f"{value!r}") from None


def main(argv):
  del argv
  from absl import logging  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.squad import export as squad_export  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.squad import run as squad_run  # pylint: disable=g-import-not-at-top
  f = FLAGS
  cli.apply_runtime_flags(f)
  threshold = parse_threshold(f.null_score_diff_threshold)
  config = cli.config_from_flags(f)
  settings = cli.settings_from_flags(squad_run.SquadSettings, f,
                                     null_score_diff_threshold=threshold,
                                     use_tpu=f.use_tpu or f.strategy == "tpu")
  strategy = cli.checked_strategy(settings, config, f)
  exporter = cli.serving_exporter(squad_export.EXPORTER, f)
  result = squad_run.run_squad(config, settings, strategy, exporter=exporter)
  logging.info("Finished at step %d", result["global_step"])
  if "eval" in result:
    logging.info("Scores: %s", result["eval"])
  if "export_dir" in result:
    logging.info("Exported the question-answering model: %s", result["export_dir"])


if __name__ == "__main__":
  cli.run(main, define_flags, "run_squad")
