"""run_multiple_choice as a library: SWAG or JSONL files in, a fine-tuned multiple-choice model,
eval accuracy and choice probabilities out.

`run_multiple_choice(config, settings)` is what `python -m bert_tf.run_multiple_choice` runs:

* Files: --data_dir holding SWAG's train.csv, val.csv and test.csv (or train.jsonl, val.jsonl,
  test.jsonl when a .csv is absent), or --train_file / --eval_file / --predict_file (which win
  over data_dir), in SWAG's CSV or the JSONL layout (tasks.multiple_choice.data). Every file is
  read and checked before anything is written. The run's files have one number of choices (a
  record holds an example's choices side by side); a predict file's labels are optional.
* Training: one record per example (output_dir/train.tf_record, each choice its own sequence),
  int(examples / train_batch_size * num_train_epochs) steps, the cross-entropy of the softmax
  over each example's choices (tasks.multiple_choice.loss). --packing=exact packs the choices as
  sequences of their own (an example's choices stay in its batch); static packing is refused.
* Evaluation (--do_eval, the val file): eval_results.txt (eval_accuracy, eval_loss, loss,
  global_step) and eval_predictions.tsv; prediction (--do_predict, the test file):
  test_predictions.tsv (guid, the chosen index, each choice's probability) and, when the file
  has labels, test_results.txt.
* After training, the command exports a raw-text multiple-choice model for TF Serving to
  output_dir/export/multiple_choice/<step>/ (tasks.multiple_choice.export).

The run's steps (lock, output_dir, tokenizer checks, resume, init_checkpoint, training, export)
are tasks.fine_tuning's; this module holds what is the task's own.
"""

import dataclasses
from typing import Any, Dict, List, Optional

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.tasks import common
from bert_tf.tasks import fine_tuning
from bert_tf.tasks import start as start_lib
from bert_tf.tasks.multiple_choice import data as mc_data
from bert_tf.tasks.multiple_choice import head as mc_head
from bert_tf.tasks.multiple_choice import loss as mc_loss
from bert_tf.tasks.multiple_choice import metrics as mc_metrics
from bert_tf.training import evaluation
from bert_tf.training import run_folder
from bert_tf.training.bucketing import SEQUENCE_INDEX
from bert_tf.training.errors import TrainingError

TASK_NAME = mc_head.MULTIPLE_CHOICE
# SWAG's file names; a split whose .csv is absent from --data_dir is read from its .jsonl.
DATA_DIR_FILES = {"train": "train", "eval": "val", "predict": "test"}
HEAD_NAME = "multiple-choice head (output_weights/output_bias)"
UNTRAINED = ("predicting with it would choose at random. Add --do_train, or point "
             "--init_checkpoint at a fine-tuned multiple-choice model")


@dataclasses.dataclass(frozen=True)
class MultipleChoiceSettings(common.FineTuningSettings):
  """Everything a run_multiple_choice run needs besides the model config (names follow the
  flags). The shared run settings are common.FineTuningSettings'; as run_classifier's:
  output_dir, vocab_file, max_seq_length, do_eval, do_predict, eval/predict_batch_size. The
  files: data_dir (train, val, test) or train_file / eval_file / predict_file."""
  output_dir: str
  vocab_file: str
  data_dir: Optional[str] = None
  train_file: Optional[str] = None
  eval_file: Optional[str] = None
  predict_file: Optional[str] = None
  max_seq_length: int = 128
  do_eval: bool = False
  do_predict: bool = False
  eval_batch_size: int = 8
  predict_batch_size: int = 8

  def file(self, split: str) -> Optional[str]:
    """The file of a split ("train", "eval", "predict"): the explicit flag, else data_dir's
    <name>.csv, or <name>.jsonl when only that exists."""
    explicit = getattr(self, f"{split}_file")
    if explicit:
      return explicit
    if not self.data_dir:
      return None
    csv_file = io.join(self.data_dir, DATA_DIR_FILES[split] + ".csv")
    jsonl = io.join(self.data_dir, DATA_DIR_FILES[split] + ".jsonl")
    return jsonl if not io.exists(csv_file) and io.exists(jsonl) else csv_file

  def check(self, config: BertConfig, num_replicas: int = 1) -> None:
    """Raises TrainingError naming every flag with an impossible value."""
    problems = common.split_file_problems(
        self, config, {split: f"{name}.csv or .jsonl" for split, name in DATA_DIR_FILES.items()})
    problems += common.fine_tuning_problems(self, num_replicas)
    if (self.packing or "").strip().lower() == "static":
      problems.append("--packing=static would part an example's choices over steps: use "
                      "--packing=exact (or auto) or none")
    if problems:
      raise TrainingError("; ".join(problems))


# === The run: what run_multiple_choice does around the driver (tasks.fine_tuning) ===


def unpadded_layers(settings: MultipleChoiceSettings) -> bool:
  """Whether the model trains with unpadded layers (mc_head.build_multiple_choice_model): they
  gather a batch's real tokens, a count that changes from batch to batch, which XLA would
  compile again for every count and TPUs cannot take; runs that compile their step whole
  (--use_tpu, --jit_compile) keep the padded layers."""
  return not (settings.use_tpu or settings.jit_compile)


def _read(settings: MultipleChoiceSettings, start: start_lib.Start,
          vocab_md5: str) -> fine_tuning.TaskInputs:
  data: Dict[str, Any] = {}
  counts = {}
  for split, wanted, labelled in (("train", settings.do_train, True),
                                  ("eval", settings.do_eval, True),
                                  ("predict", settings.do_predict, None)):
    data[split] = mc_data.read_examples(settings.file(split), labelled) if wanted else None
    if data[split] is not None:
      counts[settings.file(split)] = mc_data.num_choices_of(data[split])
  if len(set(counts.values())) > 1:
    raise TrainingError("the files of a run have one number of choices: " + ", ".join(
        f"{path} has {count}" for path, count in counts.items()))
  data["num_choices"] = next(iter(counts.values()))
  data["unpadded"] = unpadded_layers(settings)
  head = start_lib.starting_head(settings, start, mc_head.MULTIPLE_CHOICE, None, "explicit",
                                 "--train_file", labelled=False)
  info = dict(task_name=TASK_NAME, num_choices=data["num_choices"],
              do_lower_case=bool(settings.do_lower_case), vocab_md5=vocab_md5,
              max_seq_length=settings.max_seq_length, head=mc_head.MULTIPLE_CHOICE)
  return fine_tuning.TaskInputs(
      data=data, info=info, fresh_head=head.fresh_head, train_files=[settings.file("train")],
      outputs=[f"{name}{suffix}" for name in ("train", "eval", "test") for suffix in (
          ".tf_record", "_predictions.tsv", "_results.txt")],
      inputs={f"--{split}_file": settings.file(split) for split in ("train", "eval", "predict")},
      result={"num_choices": data["num_choices"]})


def _train_records(state: fine_tuning.RunState, path: str) -> fine_tuning.TrainingRecords:
  examples = state.inputs.data["train"]
  count = mc_data.write_records(examples, state.tokenizer, state.settings.max_seq_length, path)
  return fine_tuning.TrainingRecords(
      count, "examples", log=(f"Num examples = {count}, choices = "
                              f"{state.inputs.data['num_choices']}",))


def _record_spec(inputs: fine_tuning.TaskInputs, max_seq_length: int, is_training: bool):
  del is_training  # the same records for training, evaluation and prediction
  return mc_data.record_spec(max_seq_length, inputs.data["num_choices"])


def predict_choices(state: fine_tuning.RunState, examples: List[mc_data.Example], name: str,
                    batch_size: int) -> np.ndarray:
  """The logits [examples, choices] of `examples` (written to <name>.tf_record in the run's
  record folder), in file order, through the driver (fine_tuning.predict)."""
  path = io.join(state.record_dir, f"{name}.tf_record")
  count = mc_data.write_records(examples, state.tokenizer, state.settings.max_seq_length, path)
  choices = state.inputs.data["num_choices"]
  logging.info("  Num examples = %d, choices = %d, batch size = %d", count, choices, batch_size)
  out = fine_tuning.predict(TASK, state, path, batch_size, count, keep=(SEQUENCE_INDEX,))
  # Sequences come in example order; an example's choices in slot order when packed.
  order = np.lexsort((out[SEQUENCE_INDEX], out["example_index"]))
  logits = np.asarray(out["logits"], np.float32).reshape(-1)[order]
  if len(logits) != count * choices:
    raise TrainingError(f"{path}: {len(logits)} choices predicted, expected {count} x "
                        f"{choices}")
  return logits.reshape(count, choices)


def _evaluate(state: fine_tuning.RunState, result: Dict[str, Any]) -> Dict[str, Any]:
  """Scores the eval file (eval_*) and predicts the predict file (test_*)."""
  settings = state.settings
  out: Dict[str, Any] = {}
  for split, name, batch_size in (("eval", "eval", settings.eval_batch_size),
                                  ("predict", "test", settings.predict_batch_size)):
    examples = state.inputs.data[split]
    if examples is None:
      continue
    logging.info("***** Running %s on %s *****", "evaluation" if split == "eval" else
                 "prediction", settings.file(split))
    logits = predict_choices(state, examples, name, batch_size)
    probs = mc_metrics.probabilities(logits)
    out[f"{name}_probabilities"] = probs
    results_file = io.join(settings.output_dir, f"{name}_results.txt")
    if examples[0].label is not None:
      results = mc_metrics.eval_results(logits, [e.label for e in examples], batch_size)
      results = {key.replace("eval_", f"{name}_", 1) if name != "eval" else key: value
                 for key, value in results.items()}
      results["global_step"] = result["global_step"]
      out.update(results if name == "eval" else {name: results})
      logging.info("***** %s results *****", name)
      for key in sorted(results):
        logging.info("  %s = %s", key, results[key])
      if state.chief:
        evaluation.write_eval_results(results_file, results)
    elif state.chief:
      run_folder.remove_stale_results(settings.output_dir, [f"{name}_results.txt"],
                                      f"{settings.file(split)} has no labels to score")
    if state.chief:
      io.write_text(io.join(settings.output_dir, f"{name}_predictions.tsv"),
                    mc_metrics.prediction_lines([e.guid for e in examples], probs))
  return out


TASK = fine_tuning.FineTuningTask(
    program="run_multiple_choice", head=mc_head.MULTIPLE_CHOICE,
    head_layer=mc_head.HEAD_LAYER, head_name=HEAD_NAME, untrained=UNTRAINED,
    read=_read, train_records=_train_records,
    build_model=lambda config, inputs, packed=False: mc_head.build_multiple_choice_model(
        config, packed=packed, unpadded=inputs.data["unpadded"]),
    loss=lambda inputs: mc_loss.make_task(inputs.data["num_choices"]), record_spec=_record_spec,
    evaluate=_evaluate)


def run_multiple_choice(config: BertConfig, settings: MultipleChoiceSettings,
                        strategy: Optional[tf.distribute.Strategy] = None,
                        exporter: Optional[fine_tuning.Exporter] = None) -> Dict[str, Any]:
  """Fine-tunes, evaluates and/or predicts; resumes from output_dir if it holds a checkpoint;
  exports with `exporter` after training (the command hands in multiple_choice.export.EXPORTER).

  Returns:
    A dict with global_step, model, num_choices, num_train_steps (when training), the eval
    results (eval_accuracy, eval_loss, loss), `test` results when the predict file has labels,
    eval_probabilities / test_probabilities [examples, choices], and export_dir.

  Raises:
    TrainingError: as fine_tuning.run.
  """
  return fine_tuning.run(TASK, config, settings, strategy, exporter)
