"""run_squad as a library: records, fine-tuning, prediction, the official scores, export.

`run_squad(config, settings)` is what `python -m bert_tf.run_squad` runs. It follows the
original run_squad.py's main():

* The flags are checked as the original's validate_flags_or_throw does (one of do_train /
  do_predict, the files they need, max_seq_length within the model and above
  max_query_length + 3), and every input file is read before anything is written.
* Training: the examples are shuffled with random.Random(12345) as the original, converted to
  output_dir/train.tf_record (squad_data), and trained for int(len(train_examples) /
  train_batch_size * num_train_epochs) steps with warmup_proportion of them warming up. The step
  count comes from the examples, not the windows (google-research/bert#662: with long contexts
  that trains on fewer windows than the nominal epochs); --steps_from_features counts windows
  instead.
* Prediction: output_dir/eval.tf_record, then the model's start and end logits for every
  window (every window exactly once, on every strategy), and predictions.json,
  nbest_predictions.json and (SQuAD 2.0) null_odds.json as the original writes them.
* When the predict file has answers (a dev set), the official SQuAD v1.1 / v2.0 scores are
  computed (squad_metrics) and written to output_dir/eval_results.json; for SQuAD 2.0 with
  null_odds.json as the no-answer probabilities, so best_f1 and best_f1_thresh are there.
  null_score_diff_threshold=None (--null_score_diff_threshold=auto) rewrites predictions.json at
  best_f1_thresh and says so.

Beyond the original: resuming from output_dir, the tokenizer check against the checkpoint
(bert_tf.model.provenance), refusing to predict with a span head that was never trained, and a
raw-text question-answering export for TF Serving (output_dir/export/squad/<step>/, handed in by the
command: tasks.squad.export).

The run's steps (lock, output_dir, tokenizer checks, resume, init_checkpoint, training, export)
are tasks.fine_tuning's; this module holds what is SQuAD's own: its examples and windows, its
records, and its prediction files and scores.
"""

import dataclasses
import json
import random
from typing import Any, Dict, List, Optional

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.tasks import common
from bert_tf.tasks import fine_tuning
from bert_tf.tasks import start as start_lib
from bert_tf.tasks import teaching
from bert_tf.tasks.squad import answers as squad_answers
from bert_tf.tasks.squad import data as squad_data
from bert_tf.tasks.squad import head as squad_head
from bert_tf.tasks.squad import loss as squad
from bert_tf.tasks.squad import metrics as squad_metrics
from bert_tf.training import run_folder
from bert_tf.training.errors import TrainingError

TASK_NAME = "squad"
PREDICTIONS_FILE = "predictions.json"
NBEST_FILE = "nbest_predictions.json"
NULL_ODDS_FILE = "null_odds.json"


@dataclasses.dataclass(frozen=True)
class SquadSettings(common.FineTuningSettings):
  """Everything a run_squad run needs besides the model config (names follow the flags).

  The shared run settings are common.FineTuningSettings'. The original's: output_dir,
  vocab_file, train_file, predict_file, max_seq_length, doc_stride, max_query_length,
  do_predict, predict_batch_size, n_best_size, max_answer_length, verbose_logging,
  version_2_with_negative, null_score_diff_threshold (None: "auto", the best threshold on the
  predict file's answers). Additions: steps_from_features (count the training steps from the
  windows, not the examples); transfer_file (questions whose answers the --teacher gives:
  read_transfer_examples).
  """
  output_dir: str
  vocab_file: str
  train_file: Optional[str] = None
  predict_file: Optional[str] = None
  max_seq_length: int = 384
  doc_stride: int = 128
  max_query_length: int = 64
  do_predict: bool = False
  predict_batch_size: int = 8
  n_best_size: int = 20
  max_answer_length: int = 30
  verbose_logging: bool = False
  version_2_with_negative: bool = False
  null_score_diff_threshold: Optional[float] = 0.0
  steps_from_features: bool = False
  transfer_file: Optional[str] = None

  def check(self, config: BertConfig, num_replicas: int = 1) -> None:
    """Raises TrainingError naming every flag with an impossible value (the original's
    validate_flags_or_throw, plus the additions)."""
    problems = []
    if not self.do_train and not self.do_predict:
      problems.append("At least one of `do_train` or `do_predict` must be True.")
    if self.do_train and not self.train_file:
      problems.append("If `do_train` is True, then `train_file` must be specified.")
    if self.do_predict and not self.predict_file:
      problems.append("If `do_predict` is True, then `predict_file` must be specified.")
    if self.max_seq_length > config.max_position_embeddings:
      problems.append(f"Cannot use sequence length {self.max_seq_length} because the BERT "
                      f"model was only trained up to sequence length "
                      f"{config.max_position_embeddings} (--max_seq_length)")
    if self.max_seq_length <= self.max_query_length + 3:
      problems.append(f"The max_seq_length ({self.max_seq_length}) must be greater than "
                      f"max_query_length ({self.max_query_length}) + 3")
    for name in ("doc_stride", "max_query_length", "n_best_size", "max_answer_length"):
      if getattr(self, name) <= 0:
        problems.append(f"--{name} must be positive, got {getattr(self, name)}")
    problems += common.fine_tuning_problems(self, num_replicas)
    problems += common.transfer_file_problems(self.transfer_file, self.teacher)
    if self.null_score_diff_threshold is None and not (self.version_2_with_negative and
                                                       self.do_predict):
      problems.append("--null_score_diff_threshold=auto needs --version_2_with_negative and "
                      "--do_predict (it picks the best threshold on the predict file)")
    if problems:
      raise TrainingError("; ".join(problems))


def has_answers(articles: List[Dict[str, Any]]) -> bool:
  """Whether a SQuAD file's articles hold gold answers (a dev set) to score predictions
  against."""
  for article in articles:
    for paragraph in article.get("paragraphs", []):
      for qa in paragraph.get("qas", []):
        if qa.get("answers") or "is_impossible" in qa:
          return True
  return False


def unscorable_question(articles: List[Dict[str, Any]], v2: bool) -> Optional[str]:
  """The id of the first question the official scorer cannot score (no "answers" list; with
  SQuAD v1.1 an empty one), or None when it can score them all."""
  for article in articles:
    for paragraph in article.get("paragraphs", []):
      for qa in paragraph.get("qas", []):
        answers = qa.get("answers")
        if not isinstance(answers, list) or (not v2 and not answers):
          return str(qa.get("id"))
  return None


# === The run: what run_squad does around the driver (tasks.fine_tuning) ===


def _read(settings: SquadSettings, start: start_lib.Start,
          vocab_md5: str) -> fine_tuning.TaskInputs:
  head = start_lib.starting_head(settings, start, squad_head.SQUAD, None, "explicit", "",
                                  labelled=False)
  info = dict(task_name=TASK_NAME, head=squad_head.SQUAD,
              version_2_with_negative=settings.version_2_with_negative,
              do_lower_case=bool(settings.do_lower_case), vocab_md5=vocab_md5,
              max_seq_length=settings.max_seq_length, doc_stride=settings.doc_stride,
              max_query_length=settings.max_query_length,
              max_answer_length=settings.max_answer_length, n_best_size=settings.n_best_size)
  return fine_tuning.TaskInputs(
      data=_read_data(settings), info=info, fresh_head=head.fresh_head,
      train_files=[settings.train_file, settings.transfer_file],
      outputs=["train.tf_record", "eval.tf_record", PREDICTIONS_FILE, NBEST_FILE,
               NULL_ODDS_FILE, squad_metrics.EVAL_RESULTS_FILE],
      inputs={"--train_file": settings.train_file, "--predict_file": settings.predict_file,
              "--transfer_file": settings.transfer_file})


def _read_data(settings: SquadSettings) -> Dict[str, Any]:
  data: Dict[str, Any] = {"train": None, "predict": None, "gold": None, "transfer": []}
  if settings.do_train and settings.transfer_file:
    data["transfer"] = read_transfer_examples(settings.transfer_file)
  if settings.do_train:
    stats: Dict[str, int] = {}
    train_examples = squad_data.read_squad_examples(
        settings.train_file, is_training=True,
        version_2_with_negative=settings.version_2_with_negative, stats=stats)
    if not train_examples:
      raise TrainingError(f"--train_file={settings.train_file} has no usable training "
                               f"question ({stats.get('questions', 0)} read, "
                               f"{stats.get('skipped', 0)} skipped)")
    # The original shuffles the training examples once, with this seed, before conversion.
    random.Random(squad_data.TRAIN_SHUFFLE_SEED).shuffle(train_examples)
    data["train"], data["train_stats"] = train_examples, stats
  if settings.do_predict:
    # Read once: the examples, and the gold answers the official scores need.
    articles = squad_data.load_squad_json(settings.predict_file)
    data["predict"] = squad_data.examples_from_articles(articles, settings.predict_file,
                                                        is_training=False)
    if not data["predict"]:
      raise TrainingError(f"--predict_file={settings.predict_file} has no question")
    data["gold"] = articles if has_answers(articles) else None
    missing = data["gold"] and unscorable_question(articles, settings.version_2_with_negative)
    if missing:  # a partly answered file: predicted, not scored (the original reads no answer)
      logging.warning("--predict_file=%s: question %s has no gold answers to score (%s), so "
                      "the predictions are written but not scored", settings.predict_file,
                      missing, "an \"answers\" list" if settings.version_2_with_negative
                      else "SQuAD v1.1 needs at least one")
      data["gold"] = None
    if settings.null_score_diff_threshold is None and data["gold"] is None:
      raise TrainingError(f"--null_score_diff_threshold=auto: --predict_file="
                               f"{settings.predict_file} has no answers to pick it with")
  return data


def read_transfer_examples(path: str) -> List[squad_data.SquadExample]:
  """The questions of --transfer_file, a SQuAD-format JSON (v1.1 or v2.0 layout), read as a
  predict file's: answers and is_impossible, when given, are not read, so each of its windows
  trains on the teacher's soft targets only (UNLABELLED_POSITION).

  Raises:
    TrainingError: a missing file or one without a question (bad JSON: SquadFormatError,
      naming the file).
  """
  if not io.exists(path):
    raise TrainingError(f"--transfer_file={path} does not exist")
  examples = squad_data.examples_from_articles(squad_data.load_squad_json(path), path,
                                               is_training=False)
  if not examples:
    raise TrainingError(f"--transfer_file={path} has no question")
  return examples


# The start and end position of a --transfer_file window in the training records: it has no
# gold span, so its hard loss is dropped (loss.distillation_task).
UNLABELLED_POSITION = -1


def _write_train_windows(state: fine_tuning.RunState, path: str) -> Dict[str, int]:
  """The training examples' windows, then the --transfer_file questions' (their positions
  UNLABELLED_POSITION), written to path; the conversion's counts (transfer_windows added)."""
  settings, data = state.settings, state.inputs.data
  stats: Dict[str, int] = {}
  options = dict(tokenizer=state.tokenizer, max_seq_length=settings.max_seq_length,
                 doc_stride=settings.doc_stride, max_query_length=settings.max_query_length)
  with squad_data.FeatureWriter(path, is_training=True) as writer:
    try:
      squad_data.convert_examples_to_features(
          data["train"], is_training=True, output_fn=writer.process_feature, stats=stats,
          **options)
    except squad_data.SquadFormatError as e:  # no window at all: nothing to train on
      raise TrainingError(f"--train_file={settings.train_file}: {e}") from None
    labelled = writer.num_features

    def unlabelled(feature):
      feature.start_position = feature.end_position = UNLABELLED_POSITION
      writer.process_feature(feature)

    if data["transfer"]:
      transfer_stats: Dict[str, int] = {}
      squad_data.convert_examples_to_features(data["transfer"], is_training=False,
                                              output_fn=unlabelled, stats=transfer_stats,
                                              **options)
      _log_stats(transfer_stats, "--transfer_file")
  return dict(stats, features=writer.num_features,
              transfer_windows=writer.num_features - labelled)


def _train_records(state: fine_tuning.RunState, path: str) -> fine_tuning.TrainingRecords:
  settings = state.settings
  train_examples, transfer = state.inputs.data["train"], state.inputs.data["transfer"]
  stats = _write_train_windows(state, path)
  num_features = stats["features"]
  _log_stats(stats, "training")
  # The original counts steps from the examples (google-research/bert#662); the flag, windows.
  examples = len(train_examples) + len(transfer)
  count = num_features if settings.steps_from_features else examples
  steps = fine_tuning.num_train_steps(count, settings.train_batch_size,
                                      settings.num_train_epochs)
  log = (f"Num orig examples = {examples}",)
  if transfer:
    log += (f"  ({len(train_examples)} labelled, {len(transfer)} from --transfer_file with "
            f"{stats['transfer_windows']} windows, labelled by the teacher only)",)
  return fine_tuning.TrainingRecords(
      count, "windows" if settings.steps_from_features else "examples",
      log=log + (f"Num split examples = {num_features}",
                 f"{steps * settings.train_batch_size / num_features:.2f} epochs over the "
                 "windows"),
      result=dict(train_examples=examples, train_features=num_features,
                  train_stats=dict(state.inputs.data["train_stats"], **stats)),
      records=num_features)


def _record_spec(inputs: fine_tuning.TaskInputs, max_seq_length: int, is_training: bool):
  del inputs
  return squad_data.record_spec(max_seq_length, is_training)


def _evaluate(state: fine_tuning.RunState, result: Dict[str, Any]) -> Dict[str, Any]:
  del result
  if not state.settings.do_predict:
    return {}
  return _predict(state)


def _export_info(settings: SquadSettings, info: Dict[str, Any], result: Dict[str, Any]
                 ) -> Dict[str, Any]:
  """The export decides "" the way predictions.json did: at the threshold used (auto's pick)."""
  threshold = result.get("null_score_diff_threshold", settings.null_score_diff_threshold)
  return dict(info, null_score_diff_threshold=threshold)


def _log_stats(stats: Dict[str, int], what: str) -> None:
  if stats.get("truncated_questions"):
    logging.warning("%d %s questions are longer than --max_query_length and were cut to its "
                    "first WordPieces", stats["truncated_questions"], what)
  if stats.get("without_window"):
    logging.warning("%d %s questions have a context without any WordPiece (empty, or only "
                    "characters the tokenizer drops): no window, answered with no answer",
                    stats["without_window"], what)


def predict_logits(state: fine_tuning.RunState, record_file: str, num_features: int
                   ) -> Dict[str, np.ndarray]:
  """{"unique_ids", "start_logits", "end_logits"} for every record of an eval.tf_record, in
  file order (through the driver: fine_tuning.predict)."""
  settings = state.settings
  out = fine_tuning.predict(TASK, state, record_file, settings.predict_batch_size, num_features,
                            keep=(squad_data.UNIQUE_IDS,),
                            sequence_length=settings.max_seq_length)
  if len(out[squad_data.UNIQUE_IDS]) != num_features:
    raise TrainingError(f"{record_file}: {len(out[squad_data.UNIQUE_IDS])} windows "
                             f"predicted, expected {num_features}")
  return out


def _predict(state: fine_tuning.RunState) -> Dict[str, Any]:
  settings, data = state.settings, state.inputs.data
  examples = data["predict"]
  eval_features: List[squad_data.InputFeatures] = []
  stats: Dict[str, int] = {}
  record_file = io.join(state.record_dir, "eval.tf_record")
  with squad_data.FeatureWriter(record_file, is_training=False) as writer:

    def append_feature(feature):
      eval_features.append(feature)
      writer.process_feature(feature)

    squad_data.convert_examples_to_features(
        examples, state.tokenizer, settings.max_seq_length, settings.doc_stride,
        settings.max_query_length, is_training=False, output_fn=append_feature, stats=stats)
  logging.info("***** Running predictions *****")
  logging.info("  Num orig examples = %d", len(examples))
  logging.info("  Num split examples = %d", len(eval_features))
  logging.info("  Batch size = %d", settings.predict_batch_size)
  _log_stats(stats, "predict")
  out = predict_logits(state, record_file, len(eval_features)) \
      if eval_features else {squad_data.UNIQUE_IDS: np.zeros([0], np.int64)}
  expected = [f.unique_id for f in eval_features]
  if out[squad_data.UNIQUE_IDS].tolist() != expected:
    raise TrainingError(f"{record_file}: the predicted windows' unique_ids do not match "
                             "the converted features")
  results = [squad_answers.RawResult(uid, out["start_logits"][i].tolist(),
                                     out["end_logits"][i].tolist())
             for i, uid in enumerate(expected)]
  return write_outputs(examples, eval_features, results, settings, data["gold"], state.chief)


def _best_threshold(gold, nbest, null_odds, scores):
  """(threshold, predictions, scores) at the official scorer's best-F1 threshold. Where the best
  is "no answer to any question", the scorer reports 0.0, which still answers the questions
  with negative null odds: then a threshold below every question's odds is taken instead."""
  threshold = float(scores["best_f1_thresh"])
  predictions = squad_answers.predictions_from_nbest(nbest, null_odds, threshold)
  rescored = squad_metrics.evaluate_v2(gold, predictions, na_probs=null_odds)
  if rescored["f1"] < scores["best_f1"] - 1e-9 and null_odds:
    threshold = min(null_odds.values()) - 1.0
    predictions = squad_answers.predictions_from_nbest(nbest, null_odds, threshold)
    rescored = squad_metrics.evaluate_v2(gold, predictions, na_probs=null_odds)
  return threshold, predictions, rescored


def write_outputs(examples, eval_features, results, settings: SquadSettings,
                  gold: Optional[List[Dict[str, Any]]], chief: bool = True) -> Dict[str, Any]:
  """predictions.json, nbest_predictions.json, null_odds.json and, when `gold` (the predict
  file's articles, with answers) is given, eval_results.json in output_dir; the threshold
  search for "auto"."""
  out_dir = settings.output_dir
  threshold = settings.null_score_diff_threshold
  paths = {name: io.join(out_dir, name) for name in (PREDICTIONS_FILE, NBEST_FILE,
                                                      NULL_ODDS_FILE)}
  v2 = settings.version_2_with_negative
  predictions, nbest, null_odds = squad_answers.postprocess(
      examples, eval_features, results, settings.n_best_size, settings.max_answer_length,
      settings.do_lower_case, v2, 0.0 if threshold is None else threshold,
      settings.verbose_logging)
  result: Dict[str, Any] = {}
  scores = None
  if gold is not None:
    if v2:
      scores = squad_metrics.evaluate_v2(gold, predictions, na_probs=null_odds)
      if threshold is None:
        threshold, predictions, scores = _best_threshold(gold, nbest, null_odds, scores)
        logging.info("--null_score_diff_threshold=auto: %.6f, the threshold with the best F1 "
                     "(%.4f) on %s", threshold, scores["best_f1"], settings.predict_file)
      scores = dict(scores, null_score_diff_threshold=threshold)
    else:
      scores = squad_metrics.evaluate_v1(gold, predictions)
  if chief:
    io.write_text(paths[PREDICTIONS_FILE], squad_answers.dumps_indent4(predictions) + "\n")
    io.write_text(paths[NBEST_FILE], squad_answers.dumps_indent4(nbest) + "\n")
    if v2:
      io.write_text(paths[NULL_ODDS_FILE], squad_answers.dumps_indent4(null_odds) + "\n")
    if scores is not None:
      io.write_text(io.join(out_dir, squad_metrics.EVAL_RESULTS_FILE),
                    json.dumps(scores, indent=2) + "\n")
    else:
      run_folder.remove_stale_results(out_dir, [squad_metrics.EVAL_RESULTS_FILE], f"--predict_file="
                                  f"{settings.predict_file} has no answers to score")
    if not v2:
      run_folder.remove_stale_results(out_dir, [NULL_ODDS_FILE], "SQuAD v1.1 has no null odds")
  if scores is not None:
    logging.info("***** SQuAD %s scores on %s *****", "v2.0" if v2 else "v1.1",
                 settings.predict_file)
    for key, value in scores.items():
      logging.info("  %s = %s", key, value)
    result["eval"] = scores
  result.update(predictions=predictions, nbest=nbest, null_odds=null_odds,
                null_score_diff_threshold=threshold,
                predictions_file=paths[PREDICTIONS_FILE])
  return result


TASK = fine_tuning.FineTuningTask(
    program="run_squad", head=squad_head.SQUAD, head_layer=squad_head.HEAD_LAYER,
    head_name="SQuAD head (cls/squad/output_weights, output_bias)",
    untrained=("predicting with it would give random answers. Add --do_train, or point "
               "--init_checkpoint at a model fine-tuned on SQuAD"),
    read=_read, train_records=_train_records,
    build_model=lambda config, inputs, packed=False: squad_head.build_span_model(
        config, packed=packed),
    loss=lambda inputs: squad.TASK, record_spec=_record_spec, evaluate=_evaluate,
    export_info=_export_info,
    distill=lambda inputs, teacher_outputs, temperature, alpha: squad.distillation_task(
        teacher_outputs, temperature, alpha),
    results_files=(squad_metrics.EVAL_RESULTS_FILE,),
    # Packed, each window's softmax is over its own positions (loss.py): not the original's
    # loss over the padded row, so --packing=auto leaves SQuAD unpacked.
    packs_exactly=False,
    # The teacher's start and end logits at every position of a window (float32, 2 x
    # max_seq_length values): unpacked, the softmax of the loss runs over the padding
    # positions too, so the teacher's logits there are part of its soft targets.
    cached_outputs=("start_logits", "end_logits"), cache_layout=teaching.EVERY_POSITION)


def run_squad(config: BertConfig, settings: SquadSettings,
              strategy: Optional[tf.distribute.Strategy] = None,
              exporter: Optional[fine_tuning.Exporter] = None) -> Dict[str, Any]:
  """Fine-tunes and/or predicts; resumes from output_dir if it holds a checkpoint; exports with
  `exporter` after training (the command hands in squad_export.EXPORTER).

  Returns:
    A dict with global_step, model, num_train_steps and the training statistics (when
    training), predictions / nbest / null_odds and the official scores as `eval` (when
    predicting on a file with answers), the threshold used, and export_dir.

  Raises:
    TrainingError: as fine_tuning.run.
  """
  return fine_tuning.run(TASK, config, settings, strategy, exporter)

