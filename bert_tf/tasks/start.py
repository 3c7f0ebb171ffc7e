"""Where a fine-tuning run starts, worked out once, and what it starts with.

find_start answers "does this run resume?" once for the whole run: a run resumes --output_dir
when it holds checkpoints (or evaluates and predicts with them), else it starts from
--init_checkpoint, else from random weights. The Start it returns (with what is recorded of that
model: bert_tf.model.provenance) is handed to everything that asks: the tokenizer check
(run_tokenizer), the task's reading of its labels (starting_head), the run folder's refusals and
record (training.run_folder), and the loading of the weights (fine_tuning.init_fine_tuning).

A fine-tuned checkpoint's task_info.json (labels in id order, the task and its head, the
tokenizer) is the truth about its head: a run that uses that head uses its labels, and a head
is only ever loaded as the kind it was trained as.
"""

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from absl import logging

from bert_tf import record_schema
from bert_tf import tokenization
from bert_tf.model import provenance
from bert_tf.training import run_folder
from bert_tf.training.errors import TrainingError


@dataclasses.dataclass(frozen=True)
class Start:
  """Where a run starts.

  Attributes:
    resuming: output_dir holds checkpoints: the run resumes them (or uses them to evaluate and
      predict) and --init_checkpoint is not loaded.
    checkpoint: the model the run starts from: output_dir when resuming, else init_checkpoint
      (None: random weights).
    info: what is recorded of that model's head (its task_info.json, or a Hugging Face
      config.json's; None: nothing).
    where: the file `info` came from.
    source: the flag naming the model (--output_dir=... or --init_checkpoint=...).
  """
  resuming: bool = False
  checkpoint: Optional[str] = None
  info: Optional[Dict[str, Any]] = None
  where: Optional[str] = None
  source: str = ""

  @property
  def head(self) -> Optional[str]:
    """The fine-tuned head the starting model records (None: none, a pretrained model)."""
    return provenance.fine_tuned_head(self.info)

  @property
  def records_labels(self) -> bool:
    """Whether the starting model records its labels (or that it is a regression)."""
    return bool(self.info) and _recorded_labels(self.info)[0]


def find_start(settings) -> Start:
  """Where a run of `settings` (output_dir, init_checkpoint) starts, and what is recorded of it:
  output_dir's record when it holds checkpoints, else init_checkpoint's."""
  if run_folder.holds_checkpoints(settings.output_dir):
    resuming, checkpoint, flag = True, settings.output_dir, "--output_dir"
  elif settings.init_checkpoint:
    resuming, checkpoint, flag = False, settings.init_checkpoint, "--init_checkpoint"
  else:
    return Start()
  info, where = provenance.recorded_task_info(checkpoint)
  return Start(resuming, checkpoint, info, where if info is not None else None,
               f"{flag}={checkpoint}")


def resolved_casing(settings, start: Start):
  """settings with do_lower_case decided: --do_lower_case when given, else (None) what the model
  the run starts from records (provenance.recorded_tokenizer: its task_info.json,
  data_metadata.json, tokenizer_config.json or the original's release name), else True, the
  original's default; as export does."""
  if settings.do_lower_case is not None:
    return settings
  recorded: Dict[str, Any] = {}
  for checkpoint in (start.checkpoint, settings.init_checkpoint):
    if checkpoint and "do_lower_case" not in recorded:
      recorded = provenance.recorded_tokenizer(checkpoint)
  casing = recorded.get("do_lower_case")
  if casing is None:
    logging.info("--do_lower_case=True (the default: nothing the run starts from records its "
                 "casing)")
    casing = True
  else:
    logging.info("--do_lower_case=%s, as %s records", bool(casing), recorded["casing_source"])
  return dataclasses.replace(settings, do_lower_case=bool(casing))


def run_tokenizer(config, settings, start: Start):
  """The FullTokenizer of a fine-tuning run (settings.vocab_file, settings.do_lower_case) and
  the vocab's md5, after checking that the vocab fits the config and agrees with what
  settings.init_checkpoint and, when resuming, output_dir were trained with
  (provenance.check_tokenizer)."""
  tokenizer = tokenization.FullTokenizer(settings.vocab_file, settings.do_lower_case)
  vocab_md5 = record_schema.vocab_checksum(settings.vocab_file)
  # output_dir's record counts when it holds checkpoints: a failed run's leaves no constraint.
  provenance.check_tokenizer(
      settings.vocab_file, settings.do_lower_case,
      checkpoints=[settings.init_checkpoint, start.checkpoint if start.resuming else None],
      vocab_size=config.vocab_size, vocab_tokens=tokenization.id_count(tokenizer.vocab),
      allow_mismatch=settings.allow_tokenizer_mismatch, vocab_md5=vocab_md5)
  return tokenizer, vocab_md5


# === The head and labels a run starts with ===


def _shown(labels: Optional[List[str]]) -> str:
  return "regression (one output)" if labels is None else "[" + ", ".join(labels) + "]"


def _recorded_labels(info: Dict[str, Any]) -> Tuple[bool, Optional[List[str]]]:
  """(known, labels): a regression head's labels are None; a head without recorded labels
  (Hugging Face's placeholder LABEL_0, ...) is unknown."""
  if info.get("regression"):
    return True, None
  if info.get("labels"):
    return True, [str(label) for label in info["labels"]]
  return False, None


@dataclasses.dataclass(frozen=True)
class StartingHead:
  """The labels a run uses (None: regression) and, when the head of the checkpoint it starts
  from must not be loaded, why (the head then starts fresh)."""
  labels: Optional[List[str]]
  fresh_head: Optional[str]


def starting_head(settings, start: Start, head: str, labels: Optional[List[str]],
                  how: Optional[str], flag: str, label_file: Optional[str] = None,
                  labelled: bool = True) -> StartingHead:
  """Reconciles a run's head and labels with what the checkpoint it starts from records.

  Args:
    settings: the run's settings (output_dir, do_train).
    start: where the run starts (find_start).
    head: the command's head kind (a row of provenance.HEAD_KINDS).
    labels: the labels the flags or the data give, in id order (None: regression, or unknown).
    how: "explicit" (a flag, or a task's fixed labels), "training" (the training file's, in
      their default order), or None (unknown: they must come from the checkpoint).
    flag: the flag of the labels (--label_list, --labels); its file flag is flag + "_file".
    label_file: the file the labels were read from (flag + "_file"), when they were.
    labelled: whether the head has labels at all (a span head has none: only its kind is
      reconciled).

  Returns:
    StartingHead: the recorded labels when the recorded head is used (the training file's
    labels taken in the recorded id order), else `labels`; fresh_head set when a recorded head
    of another kind or with other labels is not loaded (training only).

  Raises:
    TrainingError: evaluating or predicting would use a head of another kind or with
      other labels than it was trained with (both named), or a resumed run's labels differ.
  """
  used = f"{flag}_file" if label_file else flag  # the flag that gave the labels
  given = f"{used}={label_file}" if label_file else flag
  either = f"{flag} or {flag}_file"
  recorded, where, source = start.info, start.where, start.source
  recorded_head = start.head
  if recorded_head is None:
    if how is None and labelled:
      raise TrainingError(
          f"no labels: without --do_train, give {either} (every label, in the model's label "
          "id order) or an --init_checkpoint / --output_dir whose task_info.json lists them")
    return StartingHead(labels, None)
  if recorded_head != head:
    message = (f"{source} holds a {recorded_head} head ({where}), not a {head}'s")
    if not settings.do_train or start.resuming:
      raise TrainingError(
          f"{message}: it is never loaded as one, and evaluating or predicting with an "
          f"untrained {head} head would give random results; point --init_checkpoint at a "
          f"fine-tuned {head}, or add --do_train to train a new one")
    logging.warning("%s: the %s head is not loaded, a new %s head starts from random weights",
                    message, recorded_head, head)
    if how is None:
      raise TrainingError(f"no labels for the new {head} head: give {either}")
    return StartingHead(labels, f"{message} (its weights are not loaded)")
  if not labelled:
    return StartingHead(labels, None)
  known, trained_with = _recorded_labels(recorded)
  if not known or how is None or labels == trained_with:
    if how is None and not known:
      raise TrainingError(f"no labels: {where} does not list the model's labels; give "
                               f"{either} (every label, in the model's label id order)")
    return StartingHead(trained_with if known else labels, None)
  same_set = labels is not None and trained_with is not None and \
      sorted(labels) == sorted(trained_with)
  if how == "training" and same_set:
    logging.info("The labels of the training data are those the model in %s was trained with:"
                 " taken in its id order %s", where, _shown(trained_with))
    return StartingHead(trained_with, None)
  both = (f"{given if how == 'explicit' else 'the training data'} gives the labels "
          f"{_shown(labels)}, but the model in {where} was trained with {_shown(trained_with)}"
          " (in label id order)")
  if start.resuming:
    raise TrainingError(f"{both}: resuming {settings.output_dir} needs its labels; use "
                             "another --output_dir")
  if not settings.do_train:
    raise TrainingError(f"{both}: its predictions would be named wrongly; give "
                             f"{flag}={','.join(trained_with or [])} or drop {used}")
  if same_set:
    raise TrainingError(f"{both}: the same labels in another order would train the "
                             f"head's outputs under other names; give {flag}="
                             f"{','.join(trained_with)} or drop {used}")
  logging.warning("%s: its %s head is not loaded, a new head for %s starts from random "
                  "weights", both, head, _shown(labels))
  return StartingHead(labels, f"{both} (its weights are not loaded)")
