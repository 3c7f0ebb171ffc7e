"""run_ner as a library: CoNLL files in, a fine-tuned tagger, conlleval scores and predictions.

`run_ner(config, settings)` is what `python -m bert_tf.run_ner` runs:

* Files: --data_dir holding train.txt, dev.txt and test.txt (the layout of the CoNLL-2003 copies
  people use), or --train_file / --eval_file / --predict_file (which win over data_dir). Every
  file is read and checked before anything is written (tagging_data: file:line errors).
* Labels: --labels, else the training file's tags ("O" first, the rest sorted), else (predicting
  with a trained model) the labels recorded in its task_info.json. A tag of the eval or predict
  file that the labels lack stops the run, naming file, line and tag.
* Training: one record per window (output_dir/train.tf_record), int(windows / train_batch_size
  * num_train_epochs) steps, the loss over each word's first piece (tasks.tagging).
* Evaluation (--do_eval, the dev file) and prediction (--do_predict, the test file): every word
  predicted once (tagging_data's windows), written in CoNLL format (word, gold, predicted:
  eval_predictions.txt / test_predictions.txt) so conlleval itself can score them; entity-level
  precision, recall and F1 (conlleval's rules, or --eval_mode=strict for IOB2 / IOBES), per
  type and overall, and token accuracy, in eval_results.txt / test_results.txt (key = value) and
  conlleval's own report in eval_conlleval.txt / test_conlleval.txt. A predict file without
  tags gets `word predicted` lines and no scores.
* After training, a raw-text tagger for TF Serving in output_dir/export/ner/<step>/.
"""

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.model import heads
from bert_tf.tasks import common
from bert_tf.tasks import tagging
from bert_tf.tasks import tagging_data
from bert_tf.tasks import tagging_metrics
from bert_tf.training import input_pipeline
from bert_tf.training import loop

TASK_NAME = "ner"
EXPORT_DIR = "export"
EXPORT_MODEL_NAME = "ner"
DATA_DIR_FILES = {"train": "train.txt", "eval": "dev.txt", "predict": "test.txt"}
TAG_SCHEMES = ("auto", "iob1", "iob2", "iobes", "plain")
EVAL_MODES = ("conlleval", "strict")
HEAD_NAME = "tagger head (output_weights/output_bias)"
UNTRAINED = ("predicting with it would give random tags. Add --do_train, or point "
             "--init_checkpoint at a fine-tuned tagger")


@dataclasses.dataclass(frozen=True)
class NerSettings(common.FineTuningSettings):
  """Everything a run_ner run needs besides the model config (names follow the flags).

  The shared run settings are common.FineTuningSettings'; as run_classifier's: output_dir,
  vocab_file, max_seq_length, do_eval, do_predict, eval/predict_batch_size.

  Tagging: data_dir (train.txt, dev.txt, test.txt), train_file / eval_file / predict_file,
  labels (every tag, in id order; default from the training file), tag_scheme (auto, iob1,
  iob2, iobes, plain), eval_mode (conlleval or strict), document_context (fill windows with the
  sentence's document, the paper's setting).
  """
  output_dir: str
  vocab_file: str
  data_dir: Optional[str] = None
  train_file: Optional[str] = None
  eval_file: Optional[str] = None
  predict_file: Optional[str] = None
  labels: Tuple[str, ...] = ()
  tag_scheme: str = "auto"
  eval_mode: str = "conlleval"
  document_context: bool = False
  max_seq_length: int = 128
  do_eval: bool = False
  do_predict: bool = False
  eval_batch_size: int = 8
  predict_batch_size: int = 8

  def file(self, split: str) -> Optional[str]:
    """The file of a split ("train", "eval", "predict"): the explicit flag, else data_dir's."""
    explicit = getattr(self, f"{split}_file")
    if explicit:
      return explicit
    return io.join(self.data_dir, DATA_DIR_FILES[split]) if self.data_dir else None

  def check(self, config: BertConfig, num_replicas: int = 1) -> None:
    """Raises loop.TrainingError naming every flag with an impossible value."""
    problems = []
    if not (self.do_train or self.do_eval or self.do_predict):
      problems.append("At least one of --do_train, --do_eval or --do_predict must be True.")
    for split, wanted in (("train", self.do_train), ("eval", self.do_eval),
                          ("predict", self.do_predict)):
      if wanted and not self.file(split):
        problems.append(f"--do_{split} needs --{split}_file or --data_dir (holding "
                        f"{DATA_DIR_FILES[split]})")
    if self.max_seq_length > config.max_position_embeddings:
      problems.append(f"Cannot use sequence length {self.max_seq_length} because the BERT model "
                      f"was only trained up to sequence length {config.max_position_embeddings}"
                      " (--max_seq_length)")
    if self.max_seq_length < 4:
      problems.append(f"--max_seq_length must be at least 4, got {self.max_seq_length}")
    problems += loop.fine_tuning_problems(self, num_replicas)
    if self.tag_scheme not in TAG_SCHEMES:
      problems.append(f"--tag_scheme must be one of {', '.join(TAG_SCHEMES)}, got "
                      f"{self.tag_scheme!r}")
    if self.eval_mode not in EVAL_MODES:
      problems.append(f"--eval_mode must be one of {', '.join(EVAL_MODES)}, got "
                      f"{self.eval_mode!r}")
    elif self.eval_mode == "strict" and self.tag_scheme in ("iob1", "plain"):
      problems.append(f"--eval_mode=strict needs the IOB2 or IOBES scheme, not "
                      f"--tag_scheme={self.tag_scheme}")
    if problems:
      raise loop.TrainingError("; ".join(problems))


def num_train_steps(num_windows: int, train_batch_size: int, num_train_epochs: float) -> int:
  return int(num_windows / train_batch_size * num_train_epochs)


def scheme_of(settings: NerSettings, sentences: Sequence[tagging_data.Sentence],
              labels: Sequence[str]) -> str:
  """The tag scheme: --tag_scheme, else detected from the tagged sentences (the training file
  first), else from the label names alone."""
  if settings.tag_scheme != "auto":
    return settings.tag_scheme
  tagged = tagging_data.tags_of(sentences)
  if tagged:
    return tagging_metrics.detect_scheme(tagged)
  return tagging_metrics.detect_scheme([list(labels)])


# === The run ===


def run_ner(config: BertConfig, settings: NerSettings,
            strategy: Optional[tf.distribute.Strategy] = None) -> Dict[str, Any]:
  """Fine-tunes, evaluates and/or predicts; resumes from output_dir if it holds a checkpoint.

  Returns:
    A dict with global_step, model, labels, scheme, num_train_steps (when training), `eval`
    and `test` scores (when the file has tags), the predicted tags per split, and export_dir.

  Raises:
    loop.TrainingError: bad flags or data (naming the flag, the file and line), a tokenizer
      that contradicts the checkpoint, an untrained head, or a non-finite loss.
  """
  strategy = strategy or loop.select_strategy()
  settings.check(config, strategy.num_replicas_in_sync)
  chief = loop.is_chief(strategy)
  existing = io.exists(settings.output_dir)
  with loop.bad_input_as_training_error():
    tokenizer, vocab_md5 = common.run_tokenizer(config, settings, existing)
    data = _read_data(settings)
    start = _labels(settings, data)
    labels = start.labels
    label_map = {tag: i for i, tag in enumerate(labels)}
    for split in ("eval", "predict"):
      if data[split] is not None:
        tagging_data.check_tags(data[split], label_map, settings.file(split))
    every = [s for split in ("train", "eval", "predict") for s in (data[split] or [])]
    recorded = common.starting_record(settings).info if not start.fresh_head else None
    if settings.tag_scheme == "auto" and not settings.do_train and recorded and \
        recorded.get("tag_scheme") in TAG_SCHEMES:
      scheme = recorded["tag_scheme"]  # the scheme the model was trained with
    else:
      scheme = scheme_of(settings, data["train"] or every, labels)
  if settings.eval_mode == "strict" and scheme not in ("iob2", "iobes"):
    raise loop.TrainingError(f"--eval_mode=strict needs the IOB2 or IOBES scheme; the tags are "
                             f"{scheme} (--tag_scheme)")
  info = dict(task_name=TASK_NAME, labels=labels, tag_scheme=scheme,
              document_context=bool(settings.document_context),
              do_lower_case=bool(settings.do_lower_case), vocab_md5=vocab_md5,
              max_seq_length=settings.max_seq_length, head=common.TAGGER_HEAD)
  common.note_training_data(settings, info, [settings.file("train")])
  common.check_outputs_not_inputs(
      common.run_outputs(settings.output_dir, [
          f"{name}{suffix}" for name in ("train", "eval", "test") for suffix in (
              ".tf_record", "_predictions.txt", "_results.txt", "_conlleval.txt")]),
      {f"--{split}_file": settings.file(split) for split in ("train", "eval", "predict")}
      | {"--vocab_file": settings.vocab_file})
  if not settings.do_train and not settings.init_checkpoint and not (
      existing and tf.train.latest_checkpoint(settings.output_dir)):
    # Refused before output_dir is touched (init_fine_tuning refuses the other untrained cases).
    raise loop.TrainingError(
        f"the {HEAD_NAME} was never trained: no --init_checkpoint and no checkpoint in "
        f"--output_dir={settings.output_dir}; {UNTRAINED}")
  with common.OutputDirRun(config, settings, strategy, chief, "run_ner") as record_dir:
    with loop.dtype_policy(settings.mixed_precision):
      return _run(config, settings, strategy, chief, data, labels, scheme, tokenizer, info,
                  record_dir, start.fresh_head)


def _read_data(settings: NerSettings) -> Dict[str, Any]:
  data: Dict[str, Any] = {"train": None, "eval": None, "predict": None}
  for split, wanted, labelled in (("train", settings.do_train, True),
                                  ("eval", settings.do_eval, True),
                                  ("predict", settings.do_predict, None)):
    if wanted:
      data[split] = tagging_data.read_conll(settings.file(split), labelled=labelled)
  return data


def _labels(settings: NerSettings, data: Mapping[str, Any]) -> common.StartingHead:
  """--labels, else the training file's tags, else the fine-tuned model's, reconciled with
  what the model the run starts from was trained with (common.starting_head)."""
  train = data["train"]
  if settings.labels:
    labels, how = tagging_data.label_list(train or [], settings.labels,
                                          settings.file("train") or "--labels"), "explicit"
  elif train is not None:
    labels, how = tagging_data.label_list(train, path=settings.file("train")), "training"
  else:
    labels, how = None, None
  if how is None and common.head_of(common.starting_record(settings).info) is None:
    raise tagging_data.ConllFormatError(
        "no labels: without --do_train, give --labels (every tag, in the model's label id "
        "order) or an --init_checkpoint / --output_dir whose task_info.json lists them")
  return common.starting_head(settings, common.TAGGER_HEAD, labels, how, "--labels")


def _convert(sentences, label_map, settings, tokenizer, path, what, keep=False):
  stats: Dict[str, int] = {}
  with tagging_data.FeatureWriter(path, keep=keep) as writer:
    tagging_data.convert_sentences_to_features(
        sentences, label_map, settings.max_seq_length, tokenizer, writer,
        document_context=settings.document_context, stats=stats)
  tagging_data.log_stats(stats, what)
  return writer


def _run(config, settings, strategy, chief, data, labels, scheme, tokenizer, info, record_dir,
         fresh_head=None):
  label_map = {tag: i for i, tag in enumerate(labels)}
  result: Dict[str, Any] = {"labels": labels, "scheme": scheme}
  steps = 0
  if settings.do_train:
    train_file = io.join(record_dir, "train.tf_record")
    writer = _convert(data["train"], label_map, settings, tokenizer, train_file, "training")
    steps = num_train_steps(writer.num_features, settings.train_batch_size,
                            settings.num_train_epochs)
    if steps <= 0:
      raise loop.TrainingError(
          f"{writer.num_features} training windows / --train_batch_size="
          f"{settings.train_batch_size} x --num_train_epochs={settings.num_train_epochs} is "
          "less than one step; lower the batch size or train more epochs")
    result.update(num_train_steps=steps, train_windows=writer.num_features)
    logging.info("***** Running training *****")
    logging.info("  Num sentences = %d, windows = %d", len(data["train"]), writer.num_features)
    logging.info("  Batch size = %d", settings.train_batch_size)
    logging.info("  Num steps = %d (warmup %d)", steps, int(steps * settings.warmup_proportion))

  run = loop.prepare_run(strategy, lambda: heads.build_tagger_model(config, len(labels)),
                         tagging.TASK, settings, max(steps, 1),
                         int(steps * settings.warmup_proportion), chief)
  loop.init_fine_tuning(run, settings, heads.TAGGER_LAYER, HEAD_NAME, UNTRAINED,
                        fresh_head=fresh_head)
  common.record_run_info(config, settings, chief, info)
  if settings.do_train:
    result.update(loop.fine_tune(
        run, settings, lambda batch, ctx: input_pipeline.tagging_dataset(
            io.join(record_dir, "train.tf_record"), settings.max_seq_length, batch,
            is_training=True, input_context=ctx, seed=settings.seed,
            shuffle_buffer_size=settings.shuffle_buffer_size,
            length_buckets=settings.buckets(settings.max_seq_length),
            group_by_length=settings.group_by_length,
            batches_per_update=settings.gradient_accumulation_steps), steps, chief))
  result["global_step"] = int(run.global_step.numpy())
  result["model"] = run.model

  for split, name, batch_size in (("eval", "eval", settings.eval_batch_size),
                                  ("predict", "test", settings.predict_batch_size)):
    if data[split] is None:
      continue
    logging.info("***** Running %s on %s *****", "evaluation" if split == "eval" else
                 "prediction", settings.file(split))
    predicted, scores = _predict_and_score(
        run.trainer, settings, data[split], labels, scheme, tokenizer, record_dir, name,
        batch_size, result["global_step"], chief)
    result[f"{name}_predictions"] = predicted
    if scores is not None:
      result[name] = scores
  if settings.do_train and settings.export and chief:
    from bert_tf.tasks import tagging_export  # pylint: disable=g-import-not-at-top
    result["export_dir"] = common.export_once(
        settings, EXPORT_MODEL_NAME, result["global_step"], lambda: tagging_export.export_tagger(
            run.model, config, settings, info, version=result["global_step"]))
  if not chief:
    io.remove(record_dir)
  return result


def predict_windows(trainer: loop.Trainer, record_file: str, num_windows: int,
                    max_seq_length: int, batch_size: int,
                    length_buckets: Optional[Sequence[int]] = None) -> np.ndarray:
  """The logits [windows, max_seq_length, labels] of every record of a tagging record file,
  in file order, on any strategy (with length_buckets, the positions past a batch's bucket
  hold input_pipeline.PADDED_LOGIT: they are padding, never read)."""

  def dataset_fn(ctx):
    return input_pipeline.tagging_dataset(record_file, max_seq_length, batch_size,
                                          is_training=False, input_context=ctx,
                                          num_examples=num_windows,
                                          length_buckets=length_buckets)

  iterator = iter(trainer.strategy.distribute_datasets_from_function(dataset_fn))
  out = loop.predict(trainer, iterator, input_pipeline.eval_steps(num_windows, batch_size),
                     sequence_length=max_seq_length)
  if len(out["logits"]) != num_windows:
    raise loop.TrainingError(f"{record_file}: {len(out['logits'])} windows predicted, expected "
                             f"{num_windows}")
  return out["logits"]


def token_loss(logits: np.ndarray, features_list: Sequence[tagging_data.InputFeatures]
               ) -> float:
  """Mean cross-entropy over the labelled positions (the training loss, on eval data)."""
  total, count = 0.0, 0
  for feature, row in zip(features_list, logits):
    mask = np.asarray(feature.label_mask, bool)
    if not mask.any():
      continue
    chosen = row[mask].astype(np.float64)
    shifted = chosen - chosen.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    gold = np.asarray(feature.label_ids)[mask]
    total -= float(log_probs[np.arange(len(gold)), gold].sum())
    count += int(mask.sum())
  return total / max(count, 1)


def scores_as_results(scores: Mapping[str, Any], prefix: str) -> Dict[str, float]:
  """eval_results.txt entries: overall precision/recall/f1/accuracy and per-type f1 etc."""
  results = {f"{prefix}_{k}": float(scores[k]) for k in ("precision", "recall", "f1",
                                                         "accuracy")}
  for kind in ("gold_entities", "predicted_entities", "correct_entities", "tokens"):
    results[f"{prefix}_{kind}"] = int(scores[kind])
  for entity_type, values in scores.get("per_type", {}).items():
    for k in ("precision", "recall", "f1"):
      results[f"{prefix}_{k}_{entity_type}"] = float(values[k])
  return results


def _predict_and_score(trainer, settings, sentences, labels, scheme, tokenizer, record_dir,
                       name, batch_size, step, chief):
  label_map = {tag: i for i, tag in enumerate(labels)}
  path = io.join(record_dir, f"{name}.tf_record")
  writer = _convert(sentences, label_map, settings, tokenizer, path, name, keep=True)
  logits = predict_windows(trainer, path, writer.num_features, settings.max_seq_length,
                           batch_size, settings.buckets(settings.max_seq_length))
  predicted = tagging_data.word_predictions(writer.features, np.argmax(logits, axis=-1),
                                            sentences, labels)
  out_dir = settings.output_dir
  labelled = sentences[0].tags is not None
  scores = None
  if labelled:
    gold = tagging_data.tags_of(sentences)
    entity_scheme = scheme if scheme in ("iob2", "iobes") else None
    scores = tagging_metrics.evaluate(gold, predicted, mode=settings.eval_mode,
                                      scheme=entity_scheme if settings.eval_mode == "strict"
                                      else None)
    results = scores_as_results(scores, name)
    results[f"{name}_loss"] = token_loss(logits, writer.features)
    results["global_step"] = step
    report = tagging_metrics.conlleval_report(scores)
    logging.info("***** %s results (%s) *****\n%s", name, settings.eval_mode, report)
    if scheme == "plain":
      logging.info("  %s tags are plain (no entities): token accuracy %.4f", name,
                   scores["accuracy"])
    scores = dict(scores, loss=results[f"{name}_loss"])
  if chief:
    io.write_text(io.join(out_dir, f"{name}_predictions.txt"),
                  tagging_data.format_predictions(sentences, predicted))
    if labelled:
      loop.write_eval_results(io.join(out_dir, f"{name}_results.txt"), results)
      io.write_text(io.join(out_dir, f"{name}_conlleval.txt"), report)
    else:
      common.remove_stale_results(out_dir, [f"{name}_results.txt", f"{name}_conlleval.txt"],
                                  f"{settings.file('predict' if name == 'test' else 'eval')} "
                                  "has no tags to score")
  return predicted, scores
