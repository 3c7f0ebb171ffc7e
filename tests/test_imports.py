"""The import rules of the package layout, read from the source with `ast`.

Tiers (CONTRIBUTING.md, "Layout and import tiers"):
  foundation  io <- config, tokenization, record_schema; tokenization <- text <- packing;
              unicode_tables <- tokenization; length_buckets, logs (import nothing of ours)
  model/      foundation (provenance, what a model folder records: the foundation only, so that
              checkpoints, conversion, training and tasks all read it)
  training/   foundation + model (never serving/ or tasks/)
  serving/    foundation + model
  tasks/      foundation + model + training + serving
  data/       io, tokenization, record_schema (and no TensorFlow import at module level)
  CLIs        bert_tf.cli and the `python -m bert_tf.NAME` modules: anything; no library
              module imports them.
Every import counts, also those inside functions.
"""

import ast
import os
import subprocess
import sys

import pytest

from bert_tf import cli
from tests.helpers import REPO_ROOT

PACKAGE = os.path.join(REPO_ROOT, "bert_tf")
FOUNDATION_RULES = {
    "bert_tf.io": set(),
    "bert_tf.config": {"bert_tf.io"},
    "bert_tf.tokenization": {"bert_tf.io", "bert_tf.unicode_tables"},
    "bert_tf.text": {"bert_tf.tokenization"},
    "bert_tf.packing": {"bert_tf.text", "bert_tf.length_buckets"},
    "bert_tf.record_schema": {"bert_tf.io"},
    "bert_tf.length_buckets": set(),
    "bert_tf.row_packing": set(),  # NumPy only, like length_buckets
    "bert_tf.logs": set(),  # standard library only: its filter process imports it alone
    "bert_tf.unicode_tables": set(),  # generated data (tests/test_unicode_tables.py)
    # The one registration of a task's head: module names, read by the model tier at run time.
    "bert_tf.task_heads": set(),
}
FOUNDATION = set(FOUNDATION_RULES)
# Modules of a tier that may import less than their tier: provenance sits below every other
# reader of a model folder (checkpoints, conversion, training, tasks, the commands).
NARROW_RULES = {"bert_tf.model.provenance": FOUNDATION}
TENSORFLOW_MODULES = ("tensorflow", "tensorflow_text", "keras", "tf_keras")


def _module_name(path):
  rel = os.path.relpath(path, REPO_ROOT)[:-len(".py")].replace(os.sep, ".")
  return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _library_files():
  for root, _, files in os.walk(PACKAGE):
    for name in sorted(files):
      if name.endswith(".py"):
        yield os.path.join(root, name)


MODULES = {_module_name(p): p for p in _library_files()}


def _is_command(path):
  with open(path, encoding="utf-8") as f:
    return 'if __name__ == "__main__":' in f.read()


# The commands: bert_tf.cli and every `python -m bert_tf.NAME` module (a top-level module run as
# a program), found rather than listed, so that a new command is no registration to edit.
CLI_MODULES = {module for module, path in MODULES.items()
               if module.count(".") == 1 and module not in FOUNDATION_RULES and _is_command(path)}


def _resolve(module, name):
  """`from module import name` -> the module imported (module.name when that is a module)."""
  candidate = f"{module}.{name}"
  return candidate if candidate in MODULES else module


def imports_of(path):
  """(module imported, line, at module level?) for every import statement in the file."""
  tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
  top_level = {id(node) for node in tree.body}
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found += [(alias.name, node.lineno, id(node) in top_level) for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      found += [(_resolve(node.module, alias.name), node.lineno, id(node) in top_level)
                for alias in node.names]
  return found


def _ours(name):
  return name == "bert_tf" or name.startswith("bert_tf.")


def _tier(module):
  if module in FOUNDATION:
    return "foundation"
  parts = module.split(".")
  return parts[1] if len(parts) > 2 else None


def allowed(importer, imported):
  """Whether module `importer` may import bert_tf module `imported`."""
  if importer in CLI_MODULES:
    return True
  if imported in CLI_MODULES or imported == "bert_tf":
    return False
  if importer in FOUNDATION_RULES:
    return imported in FOUNDATION_RULES[importer]
  if importer in NARROW_RULES:
    return imported in NARROW_RULES[importer]
  tier, target = _tier(importer), _tier(imported)
  if tier == "data":
    return imported in ("bert_tf.io", "bert_tf.tokenization", "bert_tf.record_schema") or \
        target == "data"
  permitted = {"model": {"foundation", "model"},
               "training": {"foundation", "model", "training"},
               "serving": {"foundation", "model", "serving"},
               "tasks": {"foundation", "model", "training", "serving", "tasks"}}
  return target in permitted.get(tier, set())


def test_every_library_module_is_in_a_known_tier():
  for module in MODULES:
    assert (module in ("bert_tf", "bert_tf.model", "bert_tf.training", "bert_tf.serving",
                       "bert_tf.data", "bert_tf.tasks") or module in FOUNDATION
            or module in CLI_MODULES or _tier(module) in
            ("model", "training", "serving", "data", "tasks")), module


@pytest.mark.parametrize("module", sorted(MODULES))
def test_import_rules(module):
  problems = [f"{MODULES[module]}:{line}: {module} imports {name}"
              for name, line, _ in imports_of(MODULES[module])
              if _ours(name) and not allowed(module, name)]
  assert not problems, "\n".join(problems)


def test_package_init_files_import_nothing():
  for module in ("bert_tf.model", "bert_tf.training", "bert_tf.serving", "bert_tf.data"):
    assert [name for name, _, _ in imports_of(MODULES[module])] == [], module
  # The top package imports nothing, so importing it changes no environment (issue 39).
  assert [name for name, _, _ in imports_of(MODULES["bert_tf"])] == []


def _environment_after_import(code, **env):
  environment = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
  environment.update(env, TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=environment,
                          capture_output=True, text=True, check=False, timeout=300)
  assert result.returncode == 0, result.stderr
  return result.stdout.split()


ONEDNN_PROBE = "print(os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'unset'))"
MACHINE = os.uname().machine if hasattr(os, "uname") else "non-POSIX"
ONEDNN_DEFAULT_MACHINE = pytest.mark.skipif(
    MACHINE.lower() not in cli.ONEDNN_MACHINES,
    reason=f"the commands choose oneDNN on x86-64 POSIX machines only; this one is {MACHINE}")


def test_importing_bert_tf_and_its_commands_changes_no_environment():
  code = ("import os, bert_tf, bert_tf.cli, bert_tf.run_classifier, bert_tf.logs; "
          + ONEDNN_PROBE)
  assert _environment_after_import(code) == ["unset"]


@ONEDNN_DEFAULT_MACHINE
def test_the_commands_choose_onednn_on_x86_unless_the_user_chose():
  code = "import os; from bert_tf import cli; cli.choose_cpu_kernels(); " + ONEDNN_PROBE
  assert _environment_after_import(code) == ["1"]
  assert _environment_after_import(code, TF_ENABLE_ONEDNN_OPTS="0") == ["0"]


def test_the_commands_leave_other_machines_alone():
  code = ("import os, types; os.uname = lambda: types.SimpleNamespace(machine='aarch64'); "
          "from bert_tf import cli; cli.choose_cpu_kernels(); " + ONEDNN_PROBE)
  assert _environment_after_import(code) == ["unset"]


def test_data_modules_import_no_tensorflow_at_module_level():
  for module, path in MODULES.items():
    if _tier(module) == "data":
      heavy = [name for name, _, top in imports_of(path)
               if top and name.split(".")[0] in TENSORFLOW_MODULES]
      assert not heavy, f"{module} imports {heavy} at module level"


def test_only_the_beam_pipeline_imports_apache_beam():
  for module, path in MODULES.items():
    if any(name.split(".")[0] == "apache_beam" for name, _, _ in imports_of(path)):
      assert module.startswith("bert_tf.data.beam"), module


def test_no_library_module_imports_the_beam_pipeline():
  """Beam stays optional: only the command (data_prep/create_pretraining_data.py, with --runner)
  imports bert_tf.data.beam_pipeline, inside main."""
  for module, path in MODULES.items():
    assert "bert_tf.data.beam_pipeline" not in [n for n, _, _ in imports_of(path)], module
  script = os.path.join(REPO_ROOT, "data_prep", "create_pretraining_data.py")
  found = [(top, name) for name, _, top in imports_of(script)
           if name.split(".")[0] == "apache_beam" or name == "bert_tf.data.beam_pipeline"]
  assert found == [(False, "bert_tf.data.beam_pipeline")], found


def test_training_never_reaches_serving():
  """Also transitively: nothing training imports leads to serving/ or tasks/."""
  seen, stack = set(), [m for m in MODULES if _tier(m) == "training"]
  while stack:
    module = stack.pop()
    if module in seen:
      continue
    seen.add(module)
    stack += [n for n, _, _ in imports_of(MODULES[module]) if n in MODULES]
  assert not [m for m in seen if _tier(m) in ("serving", "tasks") or m in CLI_MODULES]


def test_the_checkpoint_modules_have_one_front_door():
  """model/checkpoints.py re-exports what its modules (checkpoint_names, checkpoint_tf1, ...)
  define; only they import one another, every other module imports the front door."""
  parts = {m for m in MODULES if m.startswith("bert_tf.model.checkpoint_")}
  assert len(parts) >= 4
  for module, path in MODULES.items():
    if module not in parts and module != "bert_tf.model.checkpoints":
      reached = sorted({name for name, _, _ in imports_of(path) if name in parts})
      assert not reached, f"{module} imports {reached}: import bert_tf.model.checkpoints"


def test_the_commands_are_found():
  assert {"bert_tf.cli", "bert_tf.run_pretraining", "bert_tf.run_classifier", "bert_tf.run_squad",
          "bert_tf.run_ner", "bert_tf.extract_features", "bert_tf.convert_checkpoint",
          "bert_tf.export"} <= CLI_MODULES
  assert not CLI_MODULES & (FOUNDATION | {"bert_tf", "bert_tf.model.checkpoints"})


def test_the_rules_catch_violations():
  # The checker itself: a few imports that must be refused, and some that must pass.
  assert not allowed("bert_tf.training.loop", "bert_tf.serving.tf_serving")
  assert not allowed("bert_tf.model.checkpoints", "bert_tf.training.losses")
  assert not allowed("bert_tf.config", "bert_tf.record_schema")
  assert not allowed("bert_tf.data.writer", "bert_tf.model.heads")
  assert not allowed("bert_tf.serving.modules", "bert_tf.cli")
  assert not allowed("bert_tf.io", "bert_tf.config")
  assert not allowed("bert_tf.model.provenance", "bert_tf.model.checkpoints")
  assert allowed("bert_tf.model.provenance", "bert_tf.record_schema")
  assert allowed("bert_tf.model.checkpoints", "bert_tf.model.provenance")
  assert allowed("bert_tf.serving.modules", "bert_tf.packing")
  assert allowed("bert_tf.training.loop", "bert_tf.model.checkpoints")
  assert allowed("bert_tf.run_pretraining", "bert_tf.serving.saved_model")


def _import_graph():
  """{module: {bert_tf modules it imports, anywhere in the file}} (package __init__s and
  `bert_tf` itself left out: importing a submodule runs them, it does not make a circle)."""
  return {module: {name for name, _, _ in imports_of(path)
                   if name in MODULES and name != module and not name.endswith("__init__")
                   and name not in ("bert_tf", "bert_tf.model", "bert_tf.training",
                                    "bert_tf.serving", "bert_tf.data", "bert_tf.tasks")}
          for module, path in MODULES.items()}


def import_circles(graph):
  """The strongly connected components of more than one module (Tarjan's algorithm): each is
  a set of modules that import each other, directly or through others."""
  index, low, on_stack, stack, circles = {}, {}, set(), [], []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for target in sorted(graph.get(node, ())):
      if target not in index:
        visit(target)
        low[node] = min(low[node], low[target])
      elif target in on_stack:
        low[node] = min(low[node], index[target])
    if low[node] == index[node]:
      component = set()
      while True:
        member = stack.pop()
        on_stack.discard(member)
        component.add(member)
        if member == node:
          break
      if len(component) > 1:
        circles.append(sorted(component))

  for node in sorted(graph):
    if node not in index:
      visit(node)
  return circles


def test_import_circles_are_found():
  graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
  assert import_circles(graph) == [["a", "b", "c"]]
  assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_the_package():
  """No module reaches itself through the modules it imports (also the imports inside
  functions): e.g. a task's export imports its run for constants while the run imports the
  export."""
  assert import_circles(_import_graph()) == []
