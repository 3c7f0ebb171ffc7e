"""Readable functions and modules: no function in bert_tf/ over MAX_LINES lines or
MAX_PARAMETERS parameters without a reason, and no module over MAX_MODULE_LINES lines
(CONTRIBUTING.md, "Style"), read from the source with `ast`.

A function over either bound says why in its docstring (an __init__ may say it in its class's),
in a paragraph that starts with "Size:" (e.g. "Size: twelve parameters, the command's flags one
each."), or is in ALLOWED with the reason. Lines are the function's own, docstring excluded (nested functions count
inside the one that holds them, and are checked themselves); parameters are the named ones
(self and cls, *args and **kwargs not counted).
"""

import ast
import os

from tests.helpers import REPO_ROOT

PACKAGE = os.path.join(REPO_ROOT, "bert_tf")
MAX_LINES = 80
MAX_PARAMETERS = 10
SIZE_MARKER = "Size:"
# "module:qualified name" -> why it stays over a bound, for functions whose docstring another
# change owns. An entry that is no longer over a bound fails the test, so the list stays short.
ALLOWED = {}
MAX_MODULE_LINES = 800
# "path under bert_tf/" -> why it is still over MAX_MODULE_LINES; an entry no longer over it
# fails the test, so the list only shrinks.
LARGE_MODULES = {}


def _functions():
  """(module, qualified name, node, its class or None) of every function and method of
  bert_tf/."""
  for root, _, files in os.walk(PACKAGE):
    for name in sorted(files):
      if not name.endswith(".py"):
        continue
      path = os.path.join(root, name)
      module = os.path.relpath(path, REPO_ROOT)[:-len(".py")].replace(os.sep, ".")
      with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
      yield from _walk(module, tree, "", None)


def _walk(module, node, prefix, owner):
  for child in ast.iter_child_nodes(node):
    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
      qualified = prefix + child.name
      yield module, qualified, child, owner
      yield from _walk(module, child, qualified + ".", None)
    elif isinstance(child, ast.ClassDef):
      yield from _walk(module, child, prefix + child.name + ".", child)
    else:
      yield from _walk(module, child, prefix, owner)


def _code_lines(node) -> int:
  body = node.body
  if ast.get_docstring(node) is not None:
    body = body[1:]
  return body[-1].end_lineno - body[0].lineno + 1 if body else 0


def _parameters(node) -> int:
  args = node.args
  names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
  return len([n for n in names if n not in ("self", "cls")])


def _has_reason(node, owner=None) -> bool:
  documented = [node] + ([owner] if owner is not None and node.name == "__init__" else [])
  paragraphs = [paragraph for part in documented
                for paragraph in (ast.get_docstring(part) or "").split("\n\n")]
  return any(paragraph.strip().startswith(SIZE_MARKER) for paragraph in paragraphs)


def _oversized():
  for module, name, node, owner in _functions():
    lines, parameters = _code_lines(node), _parameters(node)
    if lines > MAX_LINES or parameters > MAX_PARAMETERS:
      yield f"{module}:{name}", node, owner, lines, parameters


def test_long_functions_and_long_parameter_lists_say_why():
  unexplained = [f"{key} (line {node.lineno}): {lines} lines, {parameters} parameters"
                 for key, node, owner, lines, parameters in _oversized()
                 if key not in ALLOWED and not _has_reason(node, owner)]
  assert not unexplained, (
      f"over {MAX_LINES} lines or {MAX_PARAMETERS} parameters without a reason: split them, "
      f"or say why in a docstring paragraph starting with {SIZE_MARKER!r}:\n" +
      "\n".join(unexplained))


def test_the_allowed_list_holds_only_oversized_functions():
  oversized = {key for key, *_ in _oversized()}
  assert sorted(set(ALLOWED) - oversized) == []


def test_the_counts():
  tree = ast.parse('def f(self, a, b=1, *args, c, **kw):\n  """Doc.\n\n  Size: why."""\n'
                   '  x = 1\n\n  return x\n')
  node = tree.body[0]
  assert (_code_lines(node), _parameters(node), _has_reason(node)) == (3, 3, True)


def _module_lines():
  for root, _, files in os.walk(PACKAGE):
    for name in sorted(files):
      if name.endswith(".py"):
        path = os.path.join(root, name)
        with open(path, encoding="utf-8") as f:
          yield os.path.relpath(path, PACKAGE).replace(os.sep, "/"), len(f.read().splitlines())


def test_no_module_is_over_the_bound():
  over = {module: lines for module, lines in _module_lines() if lines > MAX_MODULE_LINES}
  unexplained = sorted(f"bert_tf/{module}: {lines} lines" for module, lines in over.items()
                       if module not in LARGE_MODULES)
  assert not unexplained, (f"over {MAX_MODULE_LINES} lines: split by concept\n" +
                           "\n".join(unexplained))
  assert sorted(set(LARGE_MODULES) - set(over)) == []
