r"""Fine-tunes BERT for multiple choice (SWAG, or any task of a context and N choices).

  python -m bert_tf.run_multiple_choice --do_train --do_eval --data_dir=swag \
      --vocab_file=$BERT/vocab.txt --bert_config_file=$BERT/bert_config.json \
      --init_checkpoint=$BERT/bert_model.ckpt --max_seq_length=128 \
      --train_batch_size=16 --learning_rate=2e-5 --num_train_epochs=3 --output_dir=/tmp/swag

data_dir holds SWAG's train.csv, val.csv and test.csv (or .jsonl files with context, question,
choices and label; or give --train_file, --eval_file, --predict_file). Writes to output_dir:
the records, checkpoints, eval_results.txt (eval_accuracy, eval_loss), eval_predictions.tsv /
test_predictions.tsv (guid, the chosen index, each choice's probability), task_info.json, and
after training a raw-text model for TF Serving under export/multiple_choice/<step>/.
"""

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS


def define_flags(flag_values=FLAGS) -> None:
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("data_dir", None, "A directory holding SWAG's train.csv, val.csv and "
                      "test.csv (or train.jsonl, val.jsonl, test.jsonl).", **fv)
  flags.DEFINE_string("train_file", None, "The training file, SWAG CSV or JSONL (default "
                      "data_dir/train.csv).", **fv)
  flags.DEFINE_string("eval_file", None, "The file for --do_eval (default data_dir/val.csv).",
                      **fv)
  flags.DEFINE_string("predict_file", None, "The file for --do_predict (default "
                      "data_dir/test.csv); labels are optional: with them it is scored too.",
                      **fv)
  flags.DEFINE_string("output_dir", None, "Where records, checkpoints, predictions and results "
                      "go.", **fv)
  cli.define_model_flags(flag_values, do_lower_case=None,
                         do_lower_case_help=cli.RECORDED_CASING_HELP, init_checkpoint_help=(
      "Initial weights: a pretrained or fine-tuned checkpoint in any format the converters read "
      "(original TF1, Model Garden, Hugging Face .safetensors including BertForMultipleChoice, a "
      "run_pretraining or run_multiple_choice output_dir)."))
  flags.DEFINE_bool("do_train", False, "Whether to run training.", **fv)
  flags.DEFINE_bool("do_eval", False, "Whether to evaluate on the eval file.", **fv)
  flags.DEFINE_bool("do_predict", False, "Whether to predict the predict file.", **fv)
  cli.define_batch_flags(flag_values, train_batch_size=16, eval_batch_size=8,
                         predict_batch_size=8, learning_rate=2e-5)
  cli.define_fine_tuning_flags(flag_values, export_help=(
      "After training, export a raw-text multiple-choice model for TF Serving to "
      "output_dir/export/multiple_choice/<step>/."))
  cli.define_seeds_flag(flag_values)
  flags.mark_flags_as_required(["vocab_file", "output_dir"], **fv)


def settings_from_flags(f=FLAGS):
  """The run's MultipleChoiceSettings: the same-named flags."""
  from bert_tf.tasks.multiple_choice import run as mc_run  # pylint: disable=g-import-not-at-top
  return cli.settings_from_flags(mc_run.MultipleChoiceSettings, f,
                                 use_tpu=f.use_tpu or f.strategy == "tpu")


def main(argv):
  del argv
  from absl import logging  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.multiple_choice import export as mc_export  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.multiple_choice import run as mc_run  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks import repeats  # pylint: disable=g-import-not-at-top
  f = FLAGS
  cli.apply_runtime_flags(f)
  seeds = cli.seeds_from_flags(f)
  config = cli.config_from_flags(f)
  settings = settings_from_flags(f)
  strategy = cli.checked_strategy(settings, config, f)
  exporter = cli.serving_exporter(mc_export.EXPORTER, f)

  def runner(config, settings, strategy=None):
    return mc_run.run_multiple_choice(config, settings, strategy, exporter=exporter)

  if seeds:
    repeats.run_seeds(config, settings, seeds, runner, strategy)
    return
  result = runner(config, settings, strategy)
  logging.info("Finished at step %d", result["global_step"])
  if "eval_accuracy" in result:
    logging.info("eval: accuracy %.4f loss %.4f", result["eval_accuracy"], result["eval_loss"])
  if "export_dir" in result:
    logging.info("Exported the multiple-choice model: %s", result["export_dir"])


if __name__ == "__main__":
  cli.run(main, define_flags, "run_multiple_choice")
