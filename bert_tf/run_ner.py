r"""Fine-tunes BERT for token classification (NER, chunking, POS) on CoNLL files.

  python -m bert_tf.run_ner --do_train --do_eval --do_predict --data_dir=conll2003 \
      --vocab_file=$BERT/vocab.txt --bert_config_file=$BERT/bert_config.json \
      --init_checkpoint=$BERT/bert_model.ckpt --do_lower_case=False --max_seq_length=128 \
      --train_batch_size=32 --learning_rate=5e-5 --num_train_epochs=3 --output_dir=/tmp/ner

data_dir holds train.txt, dev.txt and test.txt (or give --train_file, --eval_file,
--predict_file). Writes to output_dir: the records, checkpoints, eval_predictions.txt /
test_predictions.txt (word, gold, predicted: conlleval reads them), eval_results.txt /
test_results.txt (entity precision, recall, F1 per type and overall, token accuracy),
eval_conlleval.txt / test_conlleval.txt (conlleval's report), task_info.json, and after training
a raw-text tagger for TF Serving under export/ner/<step>/.
"""

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS


def define_flags(flag_values=FLAGS) -> None:
  fv = dict(flag_values=flag_values)
  flags.DEFINE_string("data_dir", None, "A directory holding train.txt, dev.txt and test.txt "
                      "(CoNLL format).", **fv)
  flags.DEFINE_string("train_file", None, "The training CoNLL file (default data_dir/train.txt)"
                      ".", **fv)
  flags.DEFINE_string("eval_file", None, "The dev CoNLL file for --do_eval (default "
                      "data_dir/dev.txt).", **fv)
  flags.DEFINE_string("predict_file", None, "The CoNLL file for --do_predict (default "
                      "data_dir/test.txt); tags are optional: with them it is scored too.",
                      **fv)
  flags.DEFINE_string("output_dir", None, "Where records, checkpoints, predictions and results "
                      "go.", **fv)
  cli.define_model_flags(flag_values, do_lower_case=None,
                         do_lower_case_help=cli.RECORDED_CASING_HELP, init_checkpoint_help=(
      "Initial weights: a pretrained or fine-tuned checkpoint in any format the converters read "
      "(original TF1, Model Garden, Hugging Face .safetensors including BertForTokenClassification"
      ", a run_pretraining or run_ner output_dir)."))
  flags.DEFINE_bool("do_train", False, "Whether to run training.", **fv)
  flags.DEFINE_bool("do_eval", False, "Whether to evaluate on the dev file.", **fv)
  flags.DEFINE_bool("do_predict", False, "Whether to predict the test file.", **fv)
  cli.define_batch_flags(flag_values, train_batch_size=32, eval_batch_size=8,
                         predict_batch_size=8, learning_rate=5e-5)
  cli.define_fine_tuning_flags(flag_values, export_help=(
      "After training, export a raw-text tagger for TF Serving to output_dir/export/ner/<step>/."))
  cli.define_label_flags(flag_values, name="labels", help_text=(
      "Every tag of the task in label id order (default: the training file's tags, O first, "
      "the rest sorted)."))
  flags.DEFINE_enum("tag_scheme", "auto", ["auto", "iob1", "iob2", "iobes", "plain"],
                    "The tags' scheme (default: detected from the training file); plain tags "
                    "(POS) are scored by token accuracy.", **fv)
  flags.DEFINE_enum("eval_mode", "conlleval", ["conlleval", "strict"],
                    "conlleval: its lenient entity rules (an I- after O starts an entity); "
                    "strict: entities must follow the IOB2 / IOBES scheme (seqeval's strict "
                    "mode).", **fv)
  flags.DEFINE_bool("document_context", False, "Fill each window with the sentence's "
                    "neighbours from the same document (the paper's setting); only the "
                    "centre sentence is predicted.", **fv)
  flags.DEFINE_string("transfer_file", None, "With --teacher: more training sentences without "
                      "tags, one per line, its words split at spaces and tabs (as a CoNLL "
                      "file's word column holds them) and each word into WordPieces as the "
                      "training file's; each line alone, without document context. Their words "
                      "train on the teacher's soft targets only; the training file is always "
                      "part of the data.", **fv)
  flags.DEFINE_integer(
      "distill_augment", 0, "With --teacher: add this many altered copies of each training "
      "sentence (some words dropped, some swapped for words of the training file, sometimes only "
      "a run of at least half of them kept; drawn with --seed), which train on the teacher's "
      "soft targets only, as --transfer_file's inputs do; an epoch grows (1 + N)-fold. For "
      "a task without unlabelled text of its own. "
      "0: none. At the same steps: up to +4.2 points over distillation without copies on "
      "sentence classification (20 copies a sentence), +0.0 on the repository's tagging task "
      "(8 copies; benchmarks/README.md, Distillation).", **fv)
  flags.mark_flags_as_required(["vocab_file", "output_dir"], **fv)


def settings_from_flags(f=FLAGS):
  """The run's NerSettings: the same-named flags, the labels of --labels or --labels_file."""
  from bert_tf.tasks.tagging import run as tagging_run  # pylint: disable=g-import-not-at-top
  return cli.settings_from_flags(tagging_run.NerSettings, f,
                                 labels=cli.labels_from_flags("labels", f),
                                 use_tpu=f.use_tpu or f.strategy == "tpu")


def main(argv):
  del argv
  from absl import logging  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import export as tagging_export  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.tagging import run as tagging_run  # pylint: disable=g-import-not-at-top
  f = FLAGS
  cli.apply_runtime_flags(f)
  config = cli.config_from_flags(f)
  settings = settings_from_flags(f)
  strategy = cli.checked_strategy(settings, config, f)
  exporter = cli.serving_exporter(tagging_export.EXPORTER, f)
  result = tagging_run.run_ner(config, settings, strategy, exporter=exporter)
  logging.info("Finished at step %d", result["global_step"])
  for name in ("eval", "test"):
    if name in result and result[name].get("tag_scheme") == "plain":  # no entities to count
      logging.info("%s: token accuracy %.4f", name, result[name]["accuracy"])
    elif name in result:
      logging.info("%s: precision %.4f recall %.4f F1 %.4f token accuracy %.4f", name,
                   result[name]["precision"], result[name]["recall"], result[name]["f1"],
                   result[name]["accuracy"])
  if "export_dir" in result:
    logging.info("Exported the tagger: %s", result["export_dir"])


if __name__ == "__main__":
  cli.run(main, define_flags, "run_ner")
