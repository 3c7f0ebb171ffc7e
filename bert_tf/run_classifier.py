r"""Fine-tunes BERT for sentence (pair) classification or regression: the original run_classifier.py.

  python -m bert_tf.run_classifier --task_name=MRPC --do_train --do_eval \
      --data_dir=glue/MRPC --vocab_file=$BERT/vocab.txt --bert_config_file=$BERT/bert_config.json \
      --init_checkpoint=$BERT/bert_model.ckpt --max_seq_length=128 --train_batch_size=32 \
      --learning_rate=2e-5 --num_train_epochs=3.0 --output_dir=/tmp/mrpc

Tasks: the original's cola, mnli (also evaluated on the mismatched dev set), mrpc, xnli
(--xnli_language), GLUE's sst-2, qqp, qnli, rte, wnli, sts-b (regression), and generic: any
TSV, CSV or JSONL file (--text_a_column, --text_b_column, --label_column, --train_file, ...).

Writes to output_dir: train/eval/predict.tf_record (the original's records), checkpoints,
eval_results.txt, test_results.tsv (the class probabilities per test example, as the original),
test_predictions.tsv (guid, label, probabilities), task_info.json, and after training a raw-text
classifier for TF Serving under export/classifier/<step>/. --seeds runs each seed in seed_<s>/
and summarises mean +- std; --sweep runs the paper's grid and keeps the best run.
"""

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS


def define_flags(flag_values=FLAGS) -> None:
  fv = dict(flag_values=flag_values)
  # === The original's flags ===
  flags.DEFINE_string("data_dir", None, "The input data dir: the task's .tsv (or other) files.",
                      **fv)
  flags.DEFINE_string("task_name", None, "The task: cola, mnli, mrpc, xnli, sst-2, qqp, qnli, "
                      "rte, wnli, sts-b, or generic.", **fv)
  flags.DEFINE_string("output_dir", None, "Where records, checkpoints and results go.", **fv)
  cli.define_model_flags(flag_values, do_lower_case=None,
                         do_lower_case_help=cli.RECORDED_CASING_HELP, init_checkpoint_help=(
      "Initial weights: a pretrained or fine-tuned checkpoint in any format the converters read "
      "(original TF1, Model Garden, Hugging Face .safetensors, a run_pretraining or "
      "run_classifier output_dir)."))
  flags.DEFINE_bool("do_train", False, "Whether to run training.", **fv)
  flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.", **fv)
  flags.DEFINE_bool("do_predict", False, "Whether to run the model on the test set.", **fv)
  cli.define_batch_flags(flag_values, train_batch_size=32, eval_batch_size=8,
                         predict_batch_size=8, learning_rate=5e-5)
  cli.define_fine_tuning_flags(flag_values, export_help=(
      "After training, export a raw-text classifier for TF Serving to "
      "output_dir/export/classifier/<step>/."))
  # === Additions ===
  flags.DEFINE_string("xnli_language", "zh", "XNLI: the language of the dev/test sets and of "
                      "the machine-translated training set.", **fv)
  # === The generic task ===
  flags.DEFINE_string("text_a_column", None, "generic: the first text's column, a header name "
                      "(or JSONL key) or a 0-based index.", **fv)
  flags.DEFINE_string("text_b_column", None, "generic: the second text's column (pair tasks).",
                      **fv)
  flags.DEFINE_string("label_column", None, "generic: the label's column.", **fv)
  flags.DEFINE_string("guid_column", None, "generic: a column of ids for the guids (default: "
                      "the row number).", **fv)
  flags.DEFINE_bool("has_header", None, "generic: whether TSV/CSV files start with a header "
                    "(default: when a column is given by name).", **fv)
  cli.define_label_flags(flag_values, name="label_list", help_text=(
      "generic: the labels in id order (default: the training file's labels, sorted)."))
  flags.DEFINE_bool("regression", False, "generic: real-valued labels (one output, mean "
                    "squared error).", **fv)
  flags.DEFINE_enum("file_format", None, ["tsv", "csv", "jsonl"],
                    "generic: the files' format (default: from their extension).", **fv)
  flags.DEFINE_string("delimiter", None, "generic: the column separator instead of the tab "
                      "(TSV) or comma (CSV).", **fv)
  flags.DEFINE_string("train_file", None, "generic: the training file (in data_dir, or a "
                      "path); default train.tsv.", **fv)
  flags.DEFINE_string("dev_file", None, "generic: the dev file; default dev.tsv.", **fv)
  flags.DEFINE_string("test_file", None, "generic: the test file; default test.tsv.", **fv)
  flags.DEFINE_string("transfer_file", None, "With --teacher: more training inputs without "
                      "labels, one per line (pair tasks: text_a TAB text_b), which train on the "
                      "teacher's soft targets only; the training file is always part of the "
                      "data.", **fv)
  flags.DEFINE_integer(
      "distill_augment", 0, "With --teacher: add this many altered copies of each training "
      "example (some words dropped, some swapped for words of the training file, sometimes only "
      "a run of at least half of them kept; drawn with --seed), which train on the teacher's "
      "soft targets only, as --transfer_file's inputs do; an epoch grows (1 + N)-fold. For "
      "a task without unlabelled text of its own. "
      "0: none. At the same steps, 20 copies a sentence added 4.2 dev-accuracy points over "
      "distillation without them on a small task with 48 labels, 8 copies 0.8, 4 copies "
      "-0.8; with 360 labels, where the student alone beat its teacher, 20 copies cost 1.7 "
      "(benchmarks/README.md, Distillation).", **fv)
  # === Several runs ===
  cli.define_seeds_flag(flag_values)
  flags.DEFINE_bool("sweep", False, "Run the paper's grid (--sweep_learning_rates x "
                    "--sweep_epochs x --sweep_batch_sizes), keep the run with the best dev "
                    "score; output_dir/sweep_summary.tsv and best_run.txt.", **fv)
  flags.DEFINE_list("sweep_learning_rates", ["5e-5", "3e-5", "2e-5"], "Sweep learning rates.",
                    **fv)
  flags.DEFINE_list("sweep_epochs", ["2", "3", "4"], "Sweep epoch counts.", **fv)
  flags.DEFINE_list("sweep_batch_sizes", ["16", "32"], "Sweep batch sizes.", **fv)
  flags.DEFINE_bool("sweep_keep_all_checkpoints", False,
                    "Keep the checkpoints of every sweep point, not only the best.", **fv)
  flags.mark_flags_as_required(["data_dir", "task_name", "vocab_file", "output_dir"], **fv)


def settings_from_flags(f=FLAGS):
  """The run's ClassifierSettings: the same-named flags, the columns parsed, the labels of
  --label_list or --label_list_file."""
  from bert_tf.tasks.classifier import run as classifier_run  # pylint: disable=g-import-not-at-top
  return cli.settings_from_flags(
      classifier_run.ClassifierSettings, f,
      text_a_column=classifier_run.parse_column(f.text_a_column),
      text_b_column=classifier_run.parse_column(f.text_b_column),
      label_column=classifier_run.parse_column(f.label_column),
      guid_column=classifier_run.parse_column(f.guid_column),
      label_list=cli.labels_from_flags("label_list", f),
      use_tpu=f.use_tpu or f.strategy == "tpu")


def main(argv):
  del argv
  # Imported here so that --help does not pay for TensorFlow.
  from absl import logging  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_tf.tasks.classifier import export as classifier_export
  from bert_tf.tasks.classifier import run as classifier_run  # pylint: disable=g-import-not-at-top
  f = FLAGS
  cli.apply_runtime_flags(f)
  seeds = cli.seeds_from_flags(f)
  config = cli.config_from_flags(f)
  settings = settings_from_flags(f)
  strategy = cli.checked_strategy(settings, config, f)

  def runner(config, settings, strategy=None):
    exporter = cli.serving_exporter(classifier_export.EXPORTER, f)
    return classifier_run.run_classifier(config, settings, strategy, exporter=exporter)

  if f.sweep:
    overridden = [f"--{name} (give --sweep_{grid})" for name, grid in (
        ("learning_rate", "learning_rates"), ("num_train_epochs", "epochs"),
        ("train_batch_size", "batch_sizes")) if f[name].present]
    if overridden:
      raise cli.UsageError("--sweep sets each point's value of " + ", ".join(overridden) +
                           " from its grid; drop the flag or give the grid")
    result = classifier_run.run_sweep(
        config, settings,
        cli.number_list("sweep_learning_rates", f.sweep_learning_rates, float, positive=True),
        cli.number_list("sweep_epochs", f.sweep_epochs, float, positive=True),
        cli.number_list("sweep_batch_sizes", f.sweep_batch_sizes, int, positive=True),
        seeds=seeds,
        strategy=strategy, keep_all_checkpoints=f.sweep_keep_all_checkpoints, runner=runner)
    logging.info("Best run: %s", result["best_dir"])
  elif seeds:
    classifier_run.run_seeds(config, settings, seeds, strategy, runner=runner)
  else:
    result = runner(config, settings, strategy)
    logging.info("Finished at step %d", result["global_step"])
    if "export_dir" in result:
      logging.info("Exported the classifier: %s", result["export_dir"])


if __name__ == "__main__":
  cli.run(main, define_flags, "run_classifier")
