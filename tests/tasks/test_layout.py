"""The tasks/ layout: one package per task, a generic driver that names no task, and no task
that reaches into another's package (CONTRIBUTING.md, "Adding a task"), read with `ast`."""

import ast
import os
import re

from bert_tf import task_heads
from bert_tf.model import head_specs
from tests.helpers import REPO_ROOT
from tests.test_imports import imports_of

TASKS = os.path.join(REPO_ROOT, "bert_tf", "tasks")
# The modules every task shares: the driver, its settings, where a run starts,
# the original's pair truncation, the teacher of a distilled run and the altered copies it
# labels, --seeds and --sweep, and the reading of text input files.
GENERIC = ("fine_tuning.py", "repeats.py", "common.py", "start.py", "pairs.py", "teaching.py",
           "augmenting.py", "text_files.py")
# A head kind named in code: provenance's (the pretraining head) or a task's head module's.
HEAD_KINDS = re.compile(
    r"\b(?:provenance|\w+_head)\.(PRETRAINING|CLASSIFIER|SQUAD|TAGGER|MULTIPLE_CHOICE)\b")


def _task_packages():
  return sorted(name for name in os.listdir(TASKS)
                if os.path.isfile(os.path.join(TASKS, name, "__init__.py")))


def _task_of(module):
  """The task package a bert_tf.tasks module belongs to, or None for a generic module."""
  parts = module.split(".")
  return parts[2] if len(parts) > 3 and parts[:2] == ["bert_tf", "tasks"] else None


def test_tasks_holds_only_task_packages_and_the_generic_modules():
  flat = sorted(name for name in os.listdir(TASKS) if name.endswith(".py"))
  assert flat == sorted(GENERIC + ("__init__.py",))
  assert {"classifier", "squad", "tagging", "features"} <= set(_task_packages())


def test_the_generic_driver_names_no_task():
  for name in GENERIC:
    path = os.path.join(TASKS, name)
    source = open(path, encoding="utf-8").read()
    assert not HEAD_KINDS.findall(source), f"{name} names a head kind"
    imported = [module for module, _, _ in imports_of(path) if _task_of(module)]
    assert not imported, f"{name} imports {imported}"


def test_a_task_imports_no_other_task():
  for task in _task_packages():
    folder = os.path.join(TASKS, task)
    for name in sorted(os.listdir(folder)):
      if name.endswith(".py"):
        others = {_task_of(module) for module, _, _ in imports_of(os.path.join(folder, name))}
        assert others <= {None, task}, f"tasks/{task}/{name} imports {others - {None, task}}"


def test_the_checks_catch_a_task_named_or_reached():
  assert _task_of("bert_tf.tasks.squad.run") == "squad"
  assert _task_of("bert_tf.tasks.fine_tuning") is None
  assert HEAD_KINDS.findall("exact_task=task.head != squad_head.SQUAD") == ["SQUAD"]
  assert HEAD_KINDS.findall("head == provenance.PRETRAINING") == ["PRETRAINING"]
  tree_imports = imports_of(os.path.join(TASKS, "squad", "run.py"))
  assert "bert_tf.tasks.squad.data" in [module for module, _, _ in tree_imports]


def _words_of(spec, module):
  """What would name a registered head in another tier's source: its kind (as written with
  underscores, hyphens or spaces), its Hugging Face class, its task package, its dense layer's
  name and its weights' Hugging Face names."""
  kind = spec.kind.lower()
  return {kind, kind.replace("_", "-"), kind.replace("_", " "),
          spec.facts.hf_architecture.lower(), module.split(".")[2], spec.weights.layer.lower(),
          *(name.lower() for name in spec.weights.hf)}


def test_the_model_and_serving_tiers_name_no_registered_head():
  """Every fine-tuned head lives in its task's package and is named once, in
  bert_tf/task_heads.py: the model and serving tiers name none (they build in only the
  encoder's own pretraining head). The classifier, span (SQuAD), tagger and multiple-choice
  heads are all registered, so each is checked here."""
  assert {"classifier", "squad", "tagger", "multiple_choice"} <= {
      spec.kind for spec in head_specs.registered()}
  words = {word: module for module, spec in zip(task_heads.HEAD_MODULES, head_specs.registered())
           for word in _words_of(spec, module)}
  assert {"qa_outputs.weight", "squad_logits", "bertfortokenclassification"} <= set(words)
  for tier in ("model", "serving"):
    folder = os.path.join(REPO_ROOT, "bert_tf", tier)
    for name in sorted(os.listdir(folder)):
      if name.endswith(".py"):
        source = open(os.path.join(folder, name), encoding="utf-8").read().lower()
        named = sorted(word for word in words if word in source or word in name)
        assert not named, f"{tier}/{name} names {named}, registered by {words[named[0]]}"
