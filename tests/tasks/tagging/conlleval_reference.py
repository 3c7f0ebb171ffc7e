"""A literal, line-by-line re-statement of conlleval.pl (version 2004-01-26), the test oracle.

It reads the lines of a conlleval input file the way the Perl script reads standard input
(split at the delimiter, a field count fixed by the first non-empty line, "-X-" or an empty
line as a sentence boundary, the last two fields gold and guessed tag), keeps the script's
variables under their own names, and prints the report with Perl's printf semantics (on bytes).
Nothing is shared with bert_tf.tasks.tagging.metrics: its own tag splitting, its own chunk
rules written as the script's lists of tag pairs, its own report.

Two rule sets: "original", the pairs of conlleval.pl itself, and "extended", the same script
with the IOBES rules (S- and E- tags) that the library implements. The library is compared with
"extended" on every tag set and with "original" on tag sets whose prefixes are B/I/O or E/I/O.
"""

import re

BOUNDARY = "-X-"


def perl_false(value):
  """Whether Perl reads a string as false (undef, "" and "0")."""
  return value is None or value == "" or value == "0"


# The pairs (previous prefix, current prefix) of each rule. "*" matches any prefix.
ORIGINAL_END = [("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"),
                ("E", "E"), ("E", "I"), ("E", "O"), ("I", "O")]
ORIGINAL_START = [("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"),
                  ("E", "E"), ("E", "I"), ("O", "E"), ("O", "I")]
EXTENDED_END = [("E", "*"), ("S", "*"),
                ("B", "B"), ("B", "S"), ("B", "O"), ("I", "B"), ("I", "S"), ("I", "O")]
EXTENDED_START = [("*", "B"), ("*", "S"),
                  ("E", "E"), ("E", "I"), ("S", "E"), ("S", "I"), ("O", "E"), ("O", "I")]


def _pair_matches(pairs, prev_tag, tag):
  for first, second in pairs:
    if first in ("*", prev_tag) and second in ("*", tag):
      return True
  return False


def end_of_chunk(prev_tag, tag, prev_type, type_, rules):
  """endOfChunk: whether a chunk ended between the previous and the current word."""
  chunk_end = False
  if _pair_matches(ORIGINAL_END if rules == "original" else EXTENDED_END, prev_tag, tag):
    chunk_end = True
  if prev_tag != "O" and prev_tag != "." and prev_type != type_:
    chunk_end = True
  # "corrected 1998-12-22": bracket chunks have length 1
  if prev_tag == "]":
    chunk_end = True
  if prev_tag == "[":
    chunk_end = True
  return chunk_end


def start_of_chunk(prev_tag, tag, prev_type, type_, rules):
  """startOfChunk: whether a chunk started between the previous and the current word."""
  chunk_start = False
  if _pair_matches(ORIGINAL_START if rules == "original" else EXTENDED_START, prev_tag, tag):
    chunk_start = True
  if tag != "O" and tag != "." and prev_type != type_:
    chunk_start = True
  if tag == "[":
    chunk_start = True
  if tag == "]":
    chunk_start = True
  return chunk_start


def perl_split(delimiter, line):
  """Perl's split(/$delimiter/, $line): trailing empty fields are removed."""
  fields = re.split(delimiter, line)
  while fields and fields[-1] == "":
    fields.pop()
  return fields


def _split_tag(field):
  """The script's `=~ /^([^-]*)-(.*)$/` and its `$type ? $type : ""`."""
  match = re.match(r"^([^-]*)-(.*)$", field)
  if match:
    tag, type_ = match.group(1), match.group(2)
  else:
    tag, type_ = field, ""
  return tag, ("" if perl_false(type_) else type_)


class FeatureCountError(Exception):
  pass


def conlleval(lines, delimiter=" ", rules="extended"):
  """Runs the script on `lines` (strings without newlines).

  Returns:
    (state, report): the script's counters as a dict, and the text it prints.
  """
  correct_chunk = 0
  correct_tags = 0
  found_correct = 0
  found_guessed = 0
  in_correct = False
  last_correct, last_correct_type = "O", ""
  last_guessed, last_guessed_type = "O", ""
  nbr_of_features = -1
  token_counter = 0
  correct_chunk_by_type, found_correct_by_type, found_guessed_by_type = {}, {}, {}

  for line in lines:
    features = perl_split(delimiter, line)
    if nbr_of_features < 0:
      nbr_of_features = len(features) - 1
    elif nbr_of_features != len(features) - 1 and len(features) != 0:
      raise FeatureCountError(f"unexpected number of features: {len(features)} "
                              f"({nbr_of_features + 1})")
    if len(features) == 0 or features[0] == BOUNDARY:
      features = [BOUNDARY, "O", "O"]
    if len(features) < 2:
      raise FeatureCountError(f"conlleval: unexpected number of features in line {line}")
    guessed, guessed_type = _split_tag(features.pop())
    correct, correct_type = _split_tag(features.pop())
    first_item = features.pop(0)
    if first_item == BOUNDARY:
      guessed = "O"

    if in_correct:
      if (end_of_chunk(last_correct, correct, last_correct_type, correct_type, rules) and
          end_of_chunk(last_guessed, guessed, last_guessed_type, guessed_type, rules) and
          last_guessed_type == last_correct_type):
        in_correct = False
        correct_chunk += 1
        correct_chunk_by_type[last_correct_type] = \
            correct_chunk_by_type.get(last_correct_type, 0) + 1
      elif (end_of_chunk(last_correct, correct, last_correct_type, correct_type, rules) !=
            end_of_chunk(last_guessed, guessed, last_guessed_type, guessed_type, rules) or
            guessed_type != correct_type):
        in_correct = False

    if (start_of_chunk(last_correct, correct, last_correct_type, correct_type, rules) and
        start_of_chunk(last_guessed, guessed, last_guessed_type, guessed_type, rules) and
        guessed_type == correct_type):
      in_correct = True

    if start_of_chunk(last_correct, correct, last_correct_type, correct_type, rules):
      found_correct += 1
      found_correct_by_type[correct_type] = found_correct_by_type.get(correct_type, 0) + 1
    if start_of_chunk(last_guessed, guessed, last_guessed_type, guessed_type, rules):
      found_guessed += 1
      found_guessed_by_type[guessed_type] = found_guessed_by_type.get(guessed_type, 0) + 1
    if first_item != BOUNDARY:
      if correct == guessed and guessed_type == correct_type:
        correct_tags += 1
      token_counter += 1

    last_guessed, last_correct = guessed, correct
    last_guessed_type, last_correct_type = guessed_type, correct_type

  if in_correct:
    correct_chunk += 1
    correct_chunk_by_type[last_correct_type] = correct_chunk_by_type.get(last_correct_type, 0) + 1

  state = {"tokens": token_counter, "correct_tags": correct_tags,
           "found_correct": found_correct, "found_guessed": found_guessed,
           "correct_chunk": correct_chunk,
           "found_correct_by_type": found_correct_by_type,
           "found_guessed_by_type": found_guessed_by_type,
           "correct_chunk_by_type": correct_chunk_by_type}
  return state, _report(state)


def _printf(fmt, *args):
  """Perl's printf on byte strings (the script never decodes its input)."""
  encoded = tuple(a.encode("utf-8") if isinstance(a, str) else a for a in args)
  return (fmt.encode("utf-8") % encoded).decode("utf-8")


def _report(state):
  out = []
  precision, recall, fb1 = 0.0, 0.0, 0.0
  if state["found_guessed"] > 0:
    precision = 100 * state["correct_chunk"] / state["found_guessed"]
  if state["found_correct"] > 0:
    recall = 100 * state["correct_chunk"] / state["found_correct"]
  if precision + recall > 0:
    fb1 = 2 * precision * recall / (precision + recall)
  out.append(f"processed {state['tokens']} tokens with {state['found_correct']} phrases; ")
  out.append(f"found: {state['found_guessed']} phrases; correct: {state['correct_chunk']}.\n")
  if state["tokens"] > 0:
    out.append(_printf("accuracy: %6.2f%%; ", 100 * state["correct_tags"] / state["tokens"]))
    out.append(_printf("precision: %6.2f%%; ", precision))
    out.append(_printf("recall: %6.2f%%; ", recall))
    out.append(_printf("FB1: %6.2f\n", fb1))

  # sort chunk type names (byte order), with the script's duplicate check
  last_type = None
  sorted_types = []
  keys = list(state["found_correct_by_type"]) + list(state["found_guessed_by_type"])
  for i in sorted(keys, key=lambda k: k.encode("utf-8")):
    if perl_false(last_type) or last_type != i:
      sorted_types.append(i)
    last_type = i

  for i in sorted_types:
    correct_chunk = state["correct_chunk_by_type"].get(i, 0)
    found_guessed = state["found_guessed_by_type"].get(i, 0)
    found_correct = state["found_correct_by_type"].get(i, 0)
    if not found_guessed:
      precision = 0.0
    else:
      precision = 100 * correct_chunk / found_guessed
    if not found_correct:
      recall = 0.0
    else:
      recall = 100 * correct_chunk / found_correct
    if precision + recall == 0.0:
      fb1 = 0.0
    else:
      fb1 = 2 * precision * recall / (precision + recall)
    out.append(_printf("%17s: ", i))
    out.append(_printf("precision: %6.2f%%; ", precision))
    out.append(_printf("recall: %6.2f%%; ", recall))
    out.append(_printf("FB1: %6.2f  %d\n", fb1, found_guessed))
  return "".join(out)
