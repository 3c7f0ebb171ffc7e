"""run_ner as a library: CoNLL files in, a fine-tuned tagger, conlleval scores and predictions.

`run_ner(config, settings)` is what `python -m bert_tf.run_ner` runs:

* Files: --data_dir holding train.txt, dev.txt and test.txt (the layout of the CoNLL-2003 copies
  people use), or --train_file / --eval_file / --predict_file (which win over data_dir). Every
  file is read and checked before anything is written (tagging_data: file:line errors).
* Labels: --labels, else the training file's tags ("O" first, the rest sorted), else (predicting
  with a trained model) the labels recorded in its task_info.json. A tag of the eval or predict
  file that the labels lack stops the run, naming file, line and tag.
* Training: one record per window (output_dir/train.tf_record), int(windows / train_batch_size
  * num_train_epochs) steps, the loss over each word's first piece (tasks.tagging.loss).
* Evaluation (--do_eval, the dev file) and prediction (--do_predict, the test file): every word
  predicted once (tagging_data's windows), written in CoNLL format (word, gold, predicted:
  eval_predictions.txt / test_predictions.txt) so conlleval itself can score them; entity-level
  precision, recall and F1 (conlleval's rules, or --eval_mode=strict for IOB2 / IOBES), per
  type and overall, and token accuracy, in eval_results.txt / test_results.txt (key = value) and
  conlleval's own report in eval_conlleval.txt / test_conlleval.txt. A predict file without
  tags gets `word predicted` lines and no scores.
* After training, the command exports a raw-text tagger for TF Serving to
  output_dir/export/ner/<step>/ (tasks.tagging.export).

The run's steps (lock, output_dir, tokenizer checks, resume, init_checkpoint, training, export)
are tasks.fine_tuning's; this module holds what is tagging's own: its sentences, labels and
scheme, its windows and records, and its prediction and score files.
"""

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.tasks import augmenting
from bert_tf.tasks import common
from bert_tf.tasks import fine_tuning
from bert_tf.tasks import start as start_lib
from bert_tf.tasks import teaching
from bert_tf.tasks.tagging import data as tagging_data
from bert_tf.tasks.tagging import head as tagging_head
from bert_tf.tasks.tagging import loss as tagging
from bert_tf.tasks.tagging import metrics as tagging_metrics
from bert_tf.training import evaluation
from bert_tf.training import run_folder
from bert_tf.training.errors import TrainingError

TASK_NAME = "ner"
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
  labels (every tag, in id order; default from the training file; labels_file: the file it
  was read from, named in messages), tag_scheme (auto, iob1,
  iob2, iobes, plain), eval_mode (conlleval or strict), document_context (fill windows with the
  sentence's document, the paper's setting); transfer_file (plain text sentences without
  tags that the --teacher labels: tagging_data.read_plain_sentences); distill_augment (altered
  copies of each training sentence that the --teacher labels: altered_copies).
  """
  output_dir: str
  vocab_file: str
  data_dir: Optional[str] = None
  train_file: Optional[str] = None
  eval_file: Optional[str] = None
  predict_file: Optional[str] = None
  labels: Tuple[str, ...] = ()
  labels_file: Optional[str] = None  # where labels was read from (for messages)
  tag_scheme: str = "auto"
  eval_mode: str = "conlleval"
  document_context: bool = False
  max_seq_length: int = 128
  do_eval: bool = False
  do_predict: bool = False
  eval_batch_size: int = 8
  predict_batch_size: int = 8
  transfer_file: Optional[str] = None
  distill_augment: int = 0

  def file(self, split: str) -> Optional[str]:
    """The file of a split ("train", "eval", "predict"): the explicit flag, else data_dir's."""
    explicit = getattr(self, f"{split}_file")
    if explicit:
      return explicit
    return io.join(self.data_dir, DATA_DIR_FILES[split]) if self.data_dir else None

  def check(self, config: BertConfig, num_replicas: int = 1) -> None:
    """Raises TrainingError naming every flag with an impossible value."""
    problems = common.split_file_problems(self, config, DATA_DIR_FILES)
    problems += common.fine_tuning_problems(self, num_replicas)
    problems += common.transfer_file_problems(self.transfer_file, self.teacher)
    problems += augmenting.copies_problems(self.distill_augment, self.teacher)
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
      raise TrainingError("; ".join(problems))


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


# === The run: what run_ner does around the driver (tasks.fine_tuning) ===


def _read(settings: NerSettings, start: start_lib.Start,
          vocab_md5: str) -> fine_tuning.TaskInputs:
  data = _read_data(settings)
  head = _labels(settings, start, data)
  labels = head.labels
  label_map = {tag: i for i, tag in enumerate(labels)}
  for split in ("eval", "predict"):
    if data[split] is not None:
      tagging_data.check_tags(data[split], label_map, settings.file(split))
  every = [s for split in ("train", "eval", "predict") for s in (data[split] or [])]
  recorded = start.info if not head.fresh_head else None
  if settings.tag_scheme == "auto" and not settings.do_train and recorded and \
      recorded.get("tag_scheme") in TAG_SCHEMES:
    scheme = recorded["tag_scheme"]  # the scheme the model was trained with
  else:
    scheme = scheme_of(settings, data["train"] or every, labels)
  if settings.eval_mode == "strict" and scheme not in ("iob2", "iobes"):
    raise TrainingError(f"--eval_mode=strict needs the IOB2 or IOBES scheme; the tags are "
                             f"{scheme} (--tag_scheme)")
  data.update(labels=labels, scheme=scheme, transfer=(
      tagging_data.read_plain_sentences(settings.transfer_file)
      if settings.transfer_file and settings.do_train else []), copies=(
          altered_copies(data["train"], settings.distill_augment, settings.seed or 0)
          if settings.distill_augment and settings.do_train else []))
  info = dict(task_name=TASK_NAME, labels=labels, tag_scheme=scheme,
              document_context=bool(settings.document_context),
              do_lower_case=bool(settings.do_lower_case), vocab_md5=vocab_md5,
              max_seq_length=settings.max_seq_length, head=tagging_head.TAGGER)
  return fine_tuning.TaskInputs(
      data=data, info=info, fresh_head=head.fresh_head,
      train_files=[settings.file("train"), settings.transfer_file],
      made_data=fine_tuning.made_data_digest(
          "--distill_augment", [[" ".join(s.words)] for s in data["copies"]]),
      outputs=[f"{name}{suffix}" for name in ("train", "eval", "test") for suffix in (
          ".tf_record", "_predictions.txt", "_results.txt", "_conlleval.txt")],
      inputs=dict({f"--{split}_file": settings.file(split)
                   for split in ("train", "eval", "predict")},
                  **{"--transfer_file": settings.transfer_file}),
      result={"labels": labels, "scheme": scheme})


def altered_copies(sentences: Sequence[tagging_data.Sentence], copies: int,
                   seed: int) -> List[tagging_data.Sentence]:
  """--distill_augment's sentences: `copies` altered copies of each training sentence
  (tasks/augmenting.py, drawn with --seed, 0 when unset), without tags, each a document of its
  own as a --transfer_file line is."""
  made = augmenting.altered_copies([(s.words,) for s in sentences], copies, seed)
  return [tagging_data.Sentence(words=words, tags=None, document=number,
                                line=sentences[index].line)
          for number, (index, (words,)) in enumerate(made)]


def _read_data(settings: NerSettings) -> Dict[str, Any]:
  data: Dict[str, Any] = {"train": None, "eval": None, "predict": None}
  for split, wanted, labelled in (("train", settings.do_train, True),
                                  ("eval", settings.do_eval, True),
                                  ("predict", settings.do_predict, None)):
    if wanted:
      data[split] = tagging_data.read_conll(settings.file(split), labelled=labelled)
  return data


def _labels(settings: NerSettings, start: start_lib.Start,
            data: Mapping[str, Any]) -> start_lib.StartingHead:
  """--labels (or --labels_file), else the training file's tags, else the fine-tuned model's,
  reconciled with what the model the run starts from was trained with (start.starting_head)."""
  train = data["train"]
  if settings.labels:
    labels, how = tagging_data.label_list(train or [], settings.labels,
                                          settings.file("train") or "--labels"), "explicit"
  elif train is not None:
    labels, how = tagging_data.label_list(train, path=settings.file("train")), "training"
  else:
    labels, how = None, None
  if how is None and start.head is None:
    raise tagging_data.ConllFormatError(
        "no labels: without --do_train, give --labels or --labels_file (every tag, in the "
        "model's label id order) or an --init_checkpoint / --output_dir whose task_info.json "
        "lists them")
  return start_lib.starting_head(settings, start, tagging_head.TAGGER, labels, how, "--labels",
                                 settings.labels_file)


def _convert(state: fine_tuning.RunState, sentences, path: str, what: str, keep: bool = False,
             transfer: Sequence[tagging_data.Sentence] = ()):
  """The windows of `sentences` written to path, then those of the sentences without tags
  `transfer` (--transfer_file's, --distill_augment's copies: each alone, every word's first
  piece labelled UNLABELLED_ID)."""
  settings = state.settings
  label_map = {tag: i for i, tag in enumerate(state.inputs.data["labels"])}
  stats: Dict[str, int] = {}
  with tagging_data.FeatureWriter(path, keep=keep) as writer:
    tagging_data.convert_sentences_to_features(
        sentences, label_map, settings.max_seq_length, state.tokenizer, writer,
        document_context=settings.document_context, stats=stats)
    tagging_data.log_stats(stats, what)
    if transfer:
      stats = {}
      tagging_data.convert_sentences_to_features(
          transfer, label_map, settings.max_seq_length, state.tokenizer, writer, stats=stats,
          unlabelled_id=tagging_data.UNLABELLED_ID)
      tagging_data.log_stats(stats, "for the teacher only (--transfer_file, --distill_augment)")
  return writer


def _train_records(state: fine_tuning.RunState, path: str) -> fine_tuning.TrainingRecords:
  data = state.inputs.data
  sentences, transfer, copies = data["train"], data["transfer"], data["copies"]
  writer = _convert(state, sentences, path, "training", transfer=list(transfer) + list(copies))
  log = f"Num sentences = {len(sentences)}, windows = {writer.num_features}"
  if transfer or copies:
    made = [f"{len(transfer)} sentences from --transfer_file"] if transfer else []
    made += [f"{len(copies)} altered copies (--distill_augment="
             f"{state.settings.distill_augment})"] if copies else []
    log += f" ({', '.join(made)}, labelled by the teacher only)"
  return fine_tuning.TrainingRecords(
      writer.num_features, "windows", log=(log,),
      result={"train_windows": writer.num_features})


def _record_spec(inputs: fine_tuning.TaskInputs, max_seq_length: int, is_training: bool):
  del inputs, is_training  # the same records for training, evaluation and prediction
  return tagging_data.record_spec(max_seq_length)


def _evaluate(state: fine_tuning.RunState, result: Dict[str, Any]) -> Dict[str, Any]:
  """Tags the eval file (scores, eval_*) and the predict file (test_*)."""
  settings = state.settings
  out: Dict[str, Any] = {}
  for split, name, batch_size in (("eval", "eval", settings.eval_batch_size),
                                  ("predict", "test", settings.predict_batch_size)):
    if state.inputs.data[split] is None:
      continue
    logging.info("***** Running %s on %s *****", "evaluation" if split == "eval" else
                 "prediction", settings.file(split))
    predicted, scores = _predict_and_score(state, state.inputs.data[split], name, batch_size,
                                           result["global_step"])
    out[f"{name}_predictions"] = predicted
    if scores is not None:
      out[name] = scores
  return out


def predict_windows(state: fine_tuning.RunState, record_file: str, num_windows: int,
                    batch_size: int) -> np.ndarray:
  """The logits [windows, max_seq_length, labels] of every record of a tagging record file,
  in file order, through the driver (fine_tuning.predict: with length buckets or packing, the
  positions past a window's end may hold input_pipeline.PADDED_LOGIT: they are padding, never
  read)."""
  out = fine_tuning.predict(TASK, state, record_file, batch_size, num_windows,
                            sequence_length=state.settings.max_seq_length)
  if len(out["logits"]) != num_windows:
    raise TrainingError(f"{record_file}: {len(out['logits'])} windows predicted, expected "
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


def _predict_and_score(state: fine_tuning.RunState, sentences, name: str, batch_size: int,
                       step: int):
  settings, labels, scheme = state.settings, state.inputs.data["labels"], \
      state.inputs.data["scheme"]
  path = io.join(state.record_dir, f"{name}.tf_record")
  writer = _convert(state, sentences, path, name, keep=True)
  logits = predict_windows(state, path, writer.num_features, batch_size)
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
    scores = dict(scores, loss=results[f"{name}_loss"], tag_scheme=scheme)
  if state.chief:
    io.write_text(io.join(out_dir, f"{name}_predictions.txt"),
                  tagging_data.format_predictions(sentences, predicted))
    if labelled:
      evaluation.write_eval_results(io.join(out_dir, f"{name}_results.txt"), results)
      io.write_text(io.join(out_dir, f"{name}_conlleval.txt"), report)
    else:
      run_folder.remove_stale_results(out_dir, [f"{name}_results.txt", f"{name}_conlleval.txt"],
                                  f"{settings.file('predict' if name == 'test' else 'eval')} "
                                  "has no tags to score")
  return predicted, scores


TASK = fine_tuning.FineTuningTask(
    program="run_ner", head=tagging_head.TAGGER, head_layer=tagging_head.HEAD_LAYER,
    head_name=HEAD_NAME, untrained=UNTRAINED, read=_read, train_records=_train_records,
    build_model=lambda config, inputs, packed=False: tagging_head.build_tagger_model(
        config, len(inputs.data["labels"]), packed=packed),
    loss=lambda inputs: tagging.TASK, record_spec=_record_spec, evaluate=_evaluate,
    distill=lambda inputs, teacher_outputs, temperature, alpha: tagging.distillation_task(
        teacher_outputs, temperature, alpha),
    results_files=("eval_results.txt", "test_results.txt"),
    # The teacher's logits [n, labels] of each window's n real positions (float32): its loss
    # counts no padding position, so a window of 20 pieces in rows of 128 stores 20 rows.
    cached_outputs=("logits",), cache_layout=teaching.REAL_POSITIONS)


def run_ner(config: BertConfig, settings: NerSettings,
            strategy: Optional[tf.distribute.Strategy] = None,
            exporter: Optional[fine_tuning.Exporter] = None) -> Dict[str, Any]:
  """Fine-tunes, evaluates and/or predicts; resumes from output_dir if it holds a checkpoint;
  exports with `exporter` after training (the command hands in tagging_export.EXPORTER).

  Returns:
    A dict with global_step, model, labels, scheme, num_train_steps (when training), `eval`
    and `test` scores (when the file has tags), the predicted tags per split, and export_dir.

  Raises:
    TrainingError: as fine_tuning.run.
  """
  return fine_tuning.run(TASK, config, settings, strategy, exporter)

