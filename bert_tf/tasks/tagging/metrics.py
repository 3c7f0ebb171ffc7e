"""Entity-level scores of token tagging (NER, chunking, POS), equal to CoNLL's `conlleval`.

Two modes:

* "conlleval" (the default): the counts of conlleval.pl (Tjong Kim Sang, version 2004-01-26,
  the script of the CoNLL-2000 and CoNLL-2003 shared tasks), extended to S- and E- tags.
* "strict": seqeval's mode="strict" for the IOB2 and IOBES schemes.

Tags. A tag with a hyphen is split at its first hyphen into a prefix and a type ("B-ORG" ->
("B", "ORG"); "B-ORG-X" -> ("B", "ORG-X"); "-LRB-" -> ("", "LRB-")); a tag without one is all
prefix with the type "" ("O", "NN"). As in conlleval.pl, whose Perl reads the string "0" as
false, the type "0" becomes "" ("B-0" -> ("B", "")).

The conlleval mode. Tags are read pair by pair, each with the tag before it; before the first
token of every sentence stands a boundary, read like the tag "O" (prefix "O", type ""), and a
boundary also follows the last sentence. Between a previous tag (prefix p, type pt) and the
current one (prefix c, type ct):

* a chunk ends if p is E or S; if p is B or I and c is B, S or O; if p is neither O nor "." and
  pt != ct; or if p is "[" or "]" (bracket chunks are one token long);
* a chunk starts if c is B or S; if c is E or I and p is E, S or O; if c is neither O nor "."
  and pt != ct; or if c is "[" or "]".

So an I- after O, after a sentence start or after a tag of another type starts a chunk: IOB1
data (CoNLL-2003's own files) is scored right without being told its scheme, and in IOB2 data
an I- that continues nothing is read as the start of a chunk. conlleval.pl itself predates S-
tags: its rules are those above without the S- rules, with "E ends before E, I or O" instead of
"E always ends", and with "B starts after B, I or O" instead of "B always starts". Read by the
original, IOBES is wrong ("S-PER S-PER" is one chunk; "B-X E-X B-X E-X" is one chunk, as an E-
followed by a B- ends nothing and starts nothing). The extension here is the one of seqeval's
default mode and of the Python ports of conlleval; for tags whose prefixes are B, I and O
(IOB1, IOB2) or E, I and O (IOE1, IOE2) it gives exactly the original's counts.

The counts follow the script's single pass, not a comparison of entity sets: a gold chunk and a
predicted chunk of the same type that start at the same token are "correct so far" until one of
them ends; the pair is counted correct when both end at the same place with the same type, and
is dropped when only one ends or the types of the current tags differ. found (gold / predicted)
counts the chunk starts of each side, per type of the starting tag. A token counts toward the
accuracy when its gold and predicted tags have the same prefix and type (boundaries are not
tokens). Precision = correct / predicted, recall = correct / gold, F1 = 2PR / (P + R), each 0
when its denominator is 0. For tags that are all "O" or a B-, I-, E-, S- prefix with a type,
however they follow each other, the correct count is the number of exact (type, start, end)
matches between the two sides' `entities`; for other tags it is what conlleval counts. Tags
without hyphens (POS tags such as "NN", "VBZ") have the type "" throughout and make no chunks:
token accuracy is their score. Hyphenated POS tags ("-LRB-", "-NONE-") do make chunks of their
own, as in conlleval.

The strict mode. Entities must follow the scheme: in IOB2, a B-X and the I-X that follow it; in
IOBES, an S-X alone, or B-X, any I-X, E-X (all of type X). Anything else makes no entity: in
IOB2 an I- that does not continue a B- or I- of its type ("O I-PER" scores no entity, where
conlleval finds one), in IOBES a B- not closed by its E- ("B-PER I-PER O" scores nothing).
Precision, recall and F1 count exact (type, start, end) matches, sentence by sentence. A tag
outside the scheme ("E-PER" in IOB2, "NN", "B-" without a type) is a ValueError naming it.

Files (`read_conll_predictions`) are read as conlleval reads them: one token a line, fields
separated by spaces or tabs (or by `delimiter`), the last two fields the gold and the predicted
tag, every non-empty line with the same number of fields. An empty line, or a line whose first
field is "-X-" (conlleval's boundary, whatever its other fields), ends a sentence and is not a
token. A CoNLL-2003 "-DOCSTART-" line is a token like any other, as in conlleval (only a first
field "-X-" marks a boundary).

Where the outputs could differ from conlleval.pl's: `evaluate` scores sentences as conlleval
scores a file with an empty line after every sentence (a file ending without one differs only
for malformed tags, in whether the last chunk counts as correct); conlleval splits at single
spaces (two spaces make an empty field), the reader here at runs of spaces and tabs; files are
read as UTF-8. The report (`conlleval_report`) is conlleval's to the character, including its
quirks: type names are right-aligned to 17 bytes (not characters), and the type "" is printed
twice when both gold and predicted chunks have it (bare "B", "I" tags).

Command line (argparse):
  python -m bert_tf.tasks.tagging.metrics FILE [--strict [--scheme iob2|iobes]] [-d DELIM]
prints the conlleval report of FILE ("-" reads standard input), like `conlleval < FILE`.
"""

import argparse
import collections
import re
import sys
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from bert_tf import io

CONLLEVAL = "conlleval"
STRICT = "strict"
MODES = (CONLLEVAL, STRICT)
IOB1 = "iob1"
IOB2 = "iob2"
IOBES = "iobes"
PLAIN = "plain"
STRICT_SCHEMES = (IOB2, IOBES)
BOUNDARY = "-X-"  # conlleval's sentence-boundary word

_OUTSIDE = ("O", "")  # a sentence boundary, read like the tag "O"
_SCHEME_PREFIXES = {IOB2: ("B", "I"), IOBES: ("B", "I", "E", "S")}
_FIELD_SEPARATOR = re.compile(r"[ \t\r\f\v]+")

# === Tags and chunks ===


def split_tag(tag: str) -> Tuple[str, str]:
  """(prefix, type) of a tag, split as conlleval.pl splits it.

  Args:
    tag: a tag such as "B-PER", "I-ORG-X", "O" or "NN".

  Returns:
    (text before the first hyphen, text after it) for a tag with a hyphen, else (tag, "");
    the type "0" becomes "" (conlleval's Perl reads it as false).
  """
  prefix, hyphen, chunk_type = tag.partition("-")
  if not hyphen:
    return tag, ""
  return prefix, ("" if chunk_type == "0" else chunk_type)


def _chunk_ends(previous: Tuple[str, str], current: Tuple[str, str]) -> bool:
  """Whether a chunk ends between two split tags (the module docstring's rules)."""
  prev_prefix, prev_type = previous
  prefix, chunk_type = current
  if prev_prefix in ("E", "S", "[", "]"):
    return True
  if prev_prefix in ("B", "I") and prefix in ("B", "S", "O"):
    return True
  return prev_prefix not in ("O", ".") and prev_type != chunk_type


def _chunk_starts(previous: Tuple[str, str], current: Tuple[str, str]) -> bool:
  """Whether a chunk starts at `current`, after `previous` (the module docstring's rules)."""
  prev_prefix, prev_type = previous
  prefix, chunk_type = current
  if prefix in ("B", "S", "[", "]"):
    return True
  if prefix in ("E", "I") and prev_prefix in ("E", "S", "O"):
    return True
  return prefix not in ("O", ".") and prev_type != chunk_type


def _is_scheme_tag(tag: str) -> bool:
  """Whether a tag is a B-, I-, E- or S- prefix, a hyphen and a type (not "O")."""
  prefix, hyphen, chunk_type = tag.partition("-")
  return bool(hyphen and chunk_type) and prefix in ("B", "I", "E", "S")


class SchemeConflict(NamedTuple):
  """A tag outside the scheme the other tags use (see scheme_conflict).

  Attributes:
    sentence, token: 0-based positions of the tag.
    tag: the tag.
    scheme: the scheme of the other tags ("iob1", "iob2", "iobes" or "plain").
    reason: why the tag is outside it, a phrase that follows the tag in a message.
    fatal: True when the tag changes the task (a label of its own, or another scheme's
      prefix); False for an I- that starts an entity among B-started (IOB2) entities, or a B-
      that starts one after "O" among I-started (IOB1) ones: valid tags either way, which
      conlleval scores alike, so a warning.
  """
  sentence: int
  token: int
  tag: str
  scheme: str
  reason: str
  fatal: bool


def scheme_conflict(sentences_of_tags: Iterable[Sequence[str]]) -> Optional[SchemeConflict]:
  """The first tag outside the scheme that the other tags use, or None.

  Three checks, the first that finds something wins; in each, the rarer kind of tag is the
  one outside (on a tie, the first kind named):
    1. tags without a B-/I-/E-/S- prefix and type ("PER", "b-loc", "B-", "X-PER"; "O" is
       neither kind) among tags with one, or the other way round (a "B-PER" among POS tags);
    2. E-/S- tags among entities that end on a B- or I- (an IOB file), or entities that end
       on a B- or I- among E-/S- tags (an IOBES file);
    3. (not fatal) entities started by an I- (after "O", a sentence start or another type)
       among entities started by a B- there (IOB2), or the other way round (IOB1).

  Args:
    sentences_of_tags: sentences, each a sequence of tags.

  Returns:
    A SchemeConflict naming the first such tag, or None when the tags agree.
  """
  sentences = [list(tags) for tags in sentences_of_tags]
  plain, prefixed = [], []
  for i, tags in enumerate(sentences):
    for j, tag in enumerate(tags):
      if tag != "O":
        (prefixed if _is_scheme_tag(tag) else plain).append((i, j, tag))
  if plain and prefixed:
    if len(plain) <= len(prefixed):
      i, j, tag = plain[0]
      scheme = detect_scheme([[t if _is_scheme_tag(t) else "O" for t in tags]
                              for tags in sentences])
      return SchemeConflict(
          i, j, tag, scheme, f"is outside the {scheme.upper()} scheme the other tags use "
          f"({len(prefixed)} of {len(plain) + len(prefixed)} non-O tags are a B-, I-, E- or "
          f"S- prefix and a type; tags are case-sensitive); {len(plain)} tag(s) like it", True)
    i, j, tag = prefixed[0]
    return SchemeConflict(
        i, j, tag, PLAIN, f"has a scheme prefix, but the other tags are plain ({len(plain)} "
        f"of {len(plain) + len(prefixed)} non-O tags have none); {len(prefixed)} tag(s) like "
        "it", True)
  if not prefixed:
    return None
  ends_es, ends_iob, starts_b, starts_i = [], [], [], []
  for i, tags in enumerate(sentences):
    for j, tag in enumerate(tags):
      if tag == "O":
        continue
      prefix, _, chunk_type = tag.partition("-")
      before = tags[j - 1].partition("-") if j else ("O", "", "")
      after = tags[j + 1].partition("-") if j + 1 < len(tags) else ("O", "", "")
      if prefix in ("E", "S"):
        ends_es.append((i, j, tag))
      elif not (after[0] in ("I", "E") and after[2] == chunk_type):
        ends_iob.append((i, j, tag))
      if prefix in ("B", "I") and (before[0] == "O" or before[2] != chunk_type):
        (starts_b if prefix == "B" else starts_i).append((i, j, tag))
  if ends_es and ends_iob:
    if len(ends_es) <= len(ends_iob):
      i, j, tag = ends_es[0]
      scheme = IOB1 if starts_i and len(starts_i) > len(starts_b) else IOB2
      return SchemeConflict(
          i, j, tag, scheme, f"is outside the {scheme.upper()} scheme the other tags use "
          f"({len(ends_iob)} entities end on a B- or I- tag; IOB has no E- or S-); "
          f"{len(ends_es)} E-/S- tag(s)", True)
    i, j, tag = ends_iob[0]
    return SchemeConflict(
        i, j, tag, IOBES, f"ends an entity, which the IOBES scheme the other tags use does "
        f"with an E- or S- tag ({len(ends_es)} E-/S- tags); {len(ends_iob)} entities end like "
        "it", True)
  if starts_b and starts_i and not ends_es:
    if len(starts_i) <= len(starts_b):
      i, j, tag = starts_i[0]
      return SchemeConflict(
          i, j, tag, IOB2, f"starts an entity, which the IOB2 scheme the other tags use does "
          f"with B- ({len(starts_b)} entities do); {len(starts_i)} I- tag(s) start one", False)
    i, j, tag = starts_b[0]
    return SchemeConflict(
        i, j, tag, IOB1, f"starts an entity after \"O\" or another type, which the IOB1 "
        f"scheme the other tags use does with I- ({len(starts_i)} entities do); "
        f"{len(starts_b)} B- tag(s) start one", False)
  return None


def detect_scheme(sentences_of_tags: Iterable[Sequence[str]]) -> str:
  """The tagging scheme a set of sentences' tags is written in.

  The rule, in this order:
    a ValueError if some tags other than "O" have a B-, I-, E- or S- prefix and a type and
      others do not ("B-PER" and "PER", "b-loc", "B-"): the task would silently change, an
      extra label and token accuracy instead of entity scores (see scheme_conflict);
    "plain" if no tag other than "O" has such a prefix (POS tags, "O-X", bare "B");
    "iobes" if a tag has the prefix E- or S-;
    "iob1" if an I-X starts an entity: it follows "O", the start of its sentence, or a tag of
      another type (in IOB1 a B- marks only an entity that directly follows one of its type);
    "iob2" otherwise (also for tags that are all "O", or no tags).

  Args:
    sentences_of_tags: sentences, each a sequence of tags (usually the gold tags).

  Returns:
    One of "plain", "iobes", "iob1", "iob2".

  Raises:
    ValueError: prefixed and plain tags mixed, naming the sentence, token and tag outside.
  """
  sentences = [list(tags) for tags in sentences_of_tags]
  has_plain = has_prefixed = False
  for tags in sentences:
    for tag in tags:
      if tag != "O":
        if _is_scheme_tag(tag):
          has_prefixed = True
        else:
          has_plain = True
  if has_plain and has_prefixed:
    conflict = scheme_conflict(sentences)
    raise ValueError(f"sentence {conflict.sentence + 1}, token {conflict.token + 1}: tag "
                     f"{conflict.tag!r} {conflict.reason}")
  if has_plain:
    return PLAIN
  iobes = iob1 = False
  for tags in sentences:
    previous_type = None  # None: a sentence start or "O"
    for tag in tags:
      if tag == "O":
        previous_type = None
        continue
      prefix, hyphen, chunk_type = tag.partition("-")
      if not hyphen or prefix not in ("B", "I", "E", "S"):
        return PLAIN
      if prefix in ("E", "S"):
        iobes = True
      elif prefix == "I" and previous_type != chunk_type:
        iob1 = True
      previous_type = chunk_type
  if iobes:
    return IOBES
  return IOB1 if iob1 else IOB2


def _conlleval_entities(tags: Sequence[str]) -> List[Tuple[str, int, int]]:
  spans = []
  start, chunk_type = None, ""
  previous = _OUTSIDE
  parts = [split_tag(tag) for tag in tags] + [_OUTSIDE]
  for i, current in enumerate(parts):
    starts = _chunk_starts(previous, current)  # never at the closing boundary
    if start is not None and (starts or i == len(tags) or _chunk_ends(previous, current)):
      spans.append((chunk_type, start, i))
      start = None
    if starts:
      start, chunk_type = i, current[1]
    previous = current
  return spans


def _strict_part(tag: str, scheme: str, where: str) -> Tuple[str, str]:
  """(prefix, type) of a tag of `scheme`; ValueError naming the tag when it is not one."""
  if tag == "O":
    return _OUTSIDE
  prefix, hyphen, chunk_type = tag.partition("-")
  if not hyphen or prefix not in _SCHEME_PREFIXES[scheme] or not chunk_type:
    prefixes = ", ".join(p + "-" for p in _SCHEME_PREFIXES[scheme])
    raise ValueError(f"{where}tag {tag!r} is not an {scheme.upper()} tag (expected \"O\" or "
                     f"one of {prefixes} followed by a type)")
  return prefix, chunk_type


def _strict_entities(tags: Sequence[str], scheme: str,
                     where: str = "") -> List[Tuple[str, int, int]]:
  spans = []
  start, open_type = None, None  # the entity being read, if any
  for i, tag in enumerate(tags):
    prefix, chunk_type = _strict_part(tag, scheme, where)
    continues = start is not None and chunk_type == open_type
    if scheme == IOB2:
      if start is not None and not (prefix == "I" and continues):
        spans.append((open_type, start, i))
        start = None
      if prefix == "B":
        start, open_type = i, chunk_type
    else:  # IOBES: an entity counts only once its E- (or S-) is read
      if prefix == "S":
        spans.append((chunk_type, i, i + 1))
        start = None
      elif prefix == "B":
        start, open_type = i, chunk_type
      elif prefix == "E" and continues:
        spans.append((chunk_type, start, i + 1))
        start = None
      elif not (prefix == "I" and continues):
        start = None  # "O", or an I-/E- that continues nothing: the open B- is dropped
  if scheme == IOB2 and start is not None:
    spans.append((open_type, start, len(tags)))
  return spans


def _strict_scheme(gold: Sequence[Sequence[str]], scheme: Optional[str],
                   what: str = "the gold tags") -> str:
  """The scheme of the strict mode: `scheme`, else that of `gold` (IOB2 or IOBES only)."""
  if scheme is None:
    detected = detect_scheme(gold)
    if detected not in STRICT_SCHEMES:
      raise ValueError(f"mode='strict' needs IOB2 or IOBES tags, but {what} look like "
                       f"{detected.upper()} (see detect_scheme); pass scheme='iob2' or "
                       f"'iobes', or use mode='conlleval'")
    return detected
  if scheme not in STRICT_SCHEMES:
    raise ValueError(f"mode='strict' supports the schemes {', '.join(STRICT_SCHEMES)}; got "
                     f"{scheme!r} (IOB1 and plain tags: use mode='conlleval')")
  return scheme


def _check_mode(mode: str, scheme: Optional[str]) -> None:
  if mode not in MODES:
    raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
  if mode == CONLLEVAL and scheme is not None:
    raise ValueError(f"scheme={scheme!r} is for mode='strict'; mode='conlleval' reads every "
                     f"scheme by the same rules")


def entities(tags: Sequence[str], mode: str = CONLLEVAL,
             scheme: Optional[str] = None) -> List[Tuple[str, int, int]]:
  """The entities (chunks) of one sentence's tags.

  Args:
    tags: the tags of one sentence.
    mode: "conlleval" or "strict" (the module docstring's rules).
    scheme: strict mode only: "iob2" or "iobes"; None detects it from `tags`.

  Returns:
    [(type, start, end)] in order, end exclusive. In the conlleval mode a chunk runs from a
    token where one starts to the first point where one ends or another starts, at the latest
    to the end of the sentence; its type is that of its first tag.

  Raises:
    ValueError: an unknown mode or scheme, a scheme with mode="conlleval", or in the strict
      mode a tag outside the scheme.
  """
  _check_mode(mode, scheme)
  if isinstance(tags, str):
    raise ValueError(f"tags must be a sequence of tags, got the string {tags!r}")
  if mode == CONLLEVAL:
    return _conlleval_entities(tags)
  return _strict_entities(tags, _strict_scheme([tags], scheme, "the tags"))


# === Scores ===


def _check_sentences(gold: Sequence[Sequence[str]],
                     predicted: Sequence[Sequence[str]]) -> None:
  if len(gold) != len(predicted):
    raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted sentences")
  for i, (gold_tags, predicted_tags) in enumerate(zip(gold, predicted)):
    for side, tags in (("gold", gold_tags), ("predicted", predicted_tags)):
      if isinstance(tags, str):
        raise ValueError(f"sentence {i}: the {side} sentence must be a sequence of tags, got "
                         f"the string {tags!r}")
      for tag in tags:
        if not isinstance(tag, str):
          raise ValueError(f"sentence {i}: {side} tag {tag!r} is not a string")
    if len(gold_tags) != len(predicted_tags):
      raise ValueError(f"sentence {i}: {len(gold_tags)} gold tags but {len(predicted_tags)} "
                       f"predicted tags")


def _ratios(correct: int, predicted: int, gold: int) -> Tuple[float, float, float]:
  """(precision, recall, F1) as fractions; each 0.0 when its denominator is 0."""
  precision = correct / predicted if predicted else 0.0
  recall = correct / gold if gold else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return precision, recall, f1


def _scores(tokens, correct_tags, found_gold, found_predicted, correct, mode, scheme):
  per_type = {}
  for chunk_type in sorted(set(found_gold) | set(found_predicted)):
    precision, recall, f1 = _ratios(correct[chunk_type], found_predicted[chunk_type],
                                    found_gold[chunk_type])
    per_type[chunk_type] = {"precision": precision, "recall": recall, "f1": f1,
                            "gold": found_gold[chunk_type],
                            "predicted": found_predicted[chunk_type],
                            "correct": correct[chunk_type]}
  totals = [sum(c.values()) for c in (found_gold, found_predicted, correct)]
  precision, recall, f1 = _ratios(totals[2], totals[1], totals[0])
  return {"precision": precision, "recall": recall, "f1": f1,
          "accuracy": correct_tags / tokens if tokens else 0.0,
          "tokens": tokens, "correct_tags": correct_tags, "gold_entities": totals[0],
          "predicted_entities": totals[1], "correct_entities": totals[2],
          "per_type": per_type, "mode": mode, "scheme": scheme}


def _conlleval_scores(gold, predicted):
  """conlleval's single pass over all tokens, with a boundary after every sentence."""
  found_gold, found_predicted, correct = (collections.Counter() for _ in range(3))
  tokens = correct_tags = 0
  in_correct = False  # a gold and a predicted chunk opened together and still agree
  last_gold = last_guess = _OUTSIDE
  parts = {}  # tag -> split_tag(tag)

  def pairs():
    for gold_tags, predicted_tags in zip(gold, predicted):
      for gold_tag, predicted_tag in zip(gold_tags, predicted_tags):
        for tag in (gold_tag, predicted_tag):
          if tag not in parts:
            parts[tag] = split_tag(tag)
        yield parts[gold_tag], parts[predicted_tag], True
      yield _OUTSIDE, _OUTSIDE, False

  for cur_gold, cur_guess, is_token in pairs():
    if in_correct:
      gold_ends = _chunk_ends(last_gold, cur_gold)
      guess_ends = _chunk_ends(last_guess, cur_guess)
      if gold_ends and guess_ends and last_guess[1] == last_gold[1]:
        in_correct = False
        correct[last_gold[1]] += 1
      elif gold_ends != guess_ends or cur_guess[1] != cur_gold[1]:
        in_correct = False
    gold_starts = _chunk_starts(last_gold, cur_gold)
    guess_starts = _chunk_starts(last_guess, cur_guess)
    if gold_starts and guess_starts and cur_guess[1] == cur_gold[1]:
      in_correct = True
    if gold_starts:
      found_gold[cur_gold[1]] += 1
    if guess_starts:
      found_predicted[cur_guess[1]] += 1
    if is_token:
      tokens += 1
      correct_tags += cur_gold == cur_guess
    last_gold, last_guess = cur_gold, cur_guess
  if in_correct:
    correct[last_gold[1]] += 1
  return _scores(tokens, correct_tags, found_gold, found_predicted, correct, CONLLEVAL, None)


def _strict_scores(gold, predicted, scheme):
  found_gold, found_predicted, correct = (collections.Counter() for _ in range(3))
  tokens = correct_tags = 0
  for i, (gold_tags, predicted_tags) in enumerate(zip(gold, predicted)):
    gold_spans = set(_strict_entities(gold_tags, scheme, f"sentence {i}: gold "))
    predicted_spans = set(_strict_entities(predicted_tags, scheme, f"sentence {i}: predicted "))
    found_gold.update(span[0] for span in gold_spans)
    found_predicted.update(span[0] for span in predicted_spans)
    correct.update(span[0] for span in gold_spans & predicted_spans)
    tokens += len(gold_tags)
    correct_tags += sum(g == p for g, p in zip(gold_tags, predicted_tags))
  return _scores(tokens, correct_tags, found_gold, found_predicted, correct, STRICT, scheme)


def evaluate(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]],
             mode: str = CONLLEVAL, scheme: Optional[str] = None) -> Dict[str, Any]:
  """Entity-level precision, recall and F1, and token accuracy, of predicted tags.

  Args:
    gold: sentences, each a sequence of gold tags.
    predicted: the predicted tags of the same sentences (same lengths).
    mode: "conlleval" (conlleval.pl's counts) or "strict" (seqeval's strict mode).
    scheme: strict mode only: "iob2" or "iobes"; None detects it from the gold tags
      (detect_scheme) and refuses IOB1 and plain tags.

  Returns:
    {"precision", "recall", "f1", "accuracy": fractions in [0, 1];
     "tokens", "correct_tags", "gold_entities", "predicted_entities", "correct_entities": ints;
     "per_type": {type: {"precision", "recall", "f1", "gold", "predicted", "correct"}} over the
       types of gold and predicted entities, sorted;
     "mode": the mode; "scheme": the strict mode's scheme (None in the conlleval mode)}.
    The accuracy counts tokens whose tags are equal (conlleval: equal prefix and type).

  Raises:
    ValueError: different numbers of sentences, a sentence whose gold and predicted lengths
      differ (named by its index), a tag that is not a string, an unknown mode or scheme, a
      scheme with mode="conlleval", or in the strict mode tags outside the scheme.
  """
  _check_mode(mode, scheme)
  gold, predicted = list(gold), list(predicted)
  _check_sentences(gold, predicted)
  if mode == CONLLEVAL:
    return _conlleval_scores(gold, predicted)
  return _strict_scores(gold, predicted, _strict_scheme(gold, scheme))


# === The conlleval report ===


def _percentages(correct: int, predicted: int, gold: int) -> Tuple[float, float, float]:
  """conlleval's (precision, recall, FB1) in percent, in its order of operations."""
  precision = 100 * correct / predicted if predicted > 0 else 0.0
  recall = 100 * correct / gold if gold > 0 else 0.0
  fb1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
  return precision, recall, fb1


def _right_align(text: str, width: int) -> str:
  """Perl's printf "%<width>s" on the UTF-8 bytes of `text` (it counts bytes, not letters)."""
  return " " * max(0, width - len(text.encode("utf-8", "surrogatepass"))) + text


def conlleval_report(scores: Mapping[str, Any]) -> str:
  """The text conlleval.pl prints for these scores (lines ending in "\\n").

  Args:
    scores: the result of `evaluate` (either mode). The numbers are recomputed from its counts
      in conlleval's arithmetic (percentages; FB1 from the percentages), so the text is the
      script's to the character.

  Returns:
    "processed ... tokens with ... phrases; found: ... phrases; correct: ....", the overall
    accuracy / precision / recall / FB1 line (when there are tokens), and a line per type.
  """
  tokens = scores["tokens"]
  gold, predicted, correct = (scores["gold_entities"], scores["predicted_entities"],
                              scores["correct_entities"])
  lines = [f"processed {tokens} tokens with {gold} phrases; found: {predicted} phrases; "
           f"correct: {correct}.\n"]
  if tokens > 0:
    correct_tags = scores.get("correct_tags")
    accuracy = (100 * correct_tags / tokens if correct_tags is not None
                else 100 * scores["accuracy"])
    lines.append("accuracy: %6.2f%%; precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f\n" %
                 ((accuracy,) + _percentages(correct, predicted, gold)))
  per_type = scores["per_type"]
  for chunk_type in sorted(per_type):
    counts = per_type[chunk_type]
    line = (_right_align(chunk_type, 17) +
            ": precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f  %d\n" %
            (_percentages(counts["correct"], counts["predicted"], counts["gold"]) +
             (counts["predicted"],)))
    # conlleval lists the types of gold and of predicted chunks, dropping repeats, but its test
    # for a repeat fails after the Perl-false "": that type comes twice when both sides have it.
    lines.append(line * (2 if chunk_type == "" and counts["gold"] and counts["predicted"]
                         else 1))
  return "".join(lines)


# === Files and the command line ===


def parse_conll_predictions(text: str, source: str = "<string>",
                            delimiter: Optional[str] = None
                            ) -> Tuple[List[List[str]], List[List[str]]]:
  """(gold, predicted) sentences of a predictions file's text (see read_conll_predictions).

  Args:
    text: the file's contents.
    source: the name used in error messages ("path:line: ...").
    delimiter: the field separator; None splits at runs of spaces and tabs.
  """
  gold, predicted = [], []
  gold_sentence, predicted_sentence = [], []
  expected = first_line = None
  for number, line in enumerate(text.split("\n"), start=1):
    line = line.rstrip("\r")
    if delimiter is None:
      fields = [f for f in _FIELD_SEPARATOR.split(line) if f]
    else:
      fields = line.split(delimiter)
      while fields and not fields[-1]:  # Perl's split drops empty trailing fields
        fields.pop()
    if not fields or not line.strip():
      fields = []
    elif expected is None:
      expected, first_line = len(fields), number
    elif len(fields) != expected:
      raise ValueError(f"{source}:{number}: {len(fields)} fields, but line {first_line} has "
                       f"{expected} (every token line needs the same fields, the last two "
                       f"the gold and the predicted tag)")
    if not fields or fields[0] == BOUNDARY:
      if gold_sentence:
        gold.append(gold_sentence)
        predicted.append(predicted_sentence)
        gold_sentence, predicted_sentence = [], []
      continue
    if len(fields) < 2:
      raise ValueError(f"{source}:{number}: {len(fields)} field; a token line needs at least "
                       f"2 (the gold and the predicted tag last)")
    gold_sentence.append(fields[-2])
    predicted_sentence.append(fields[-1])
  if gold_sentence:
    gold.append(gold_sentence)
    predicted.append(predicted_sentence)
  return gold, predicted


def read_conll_predictions(path: str, delimiter: Optional[str] = None
                           ) -> Tuple[List[List[str]], List[List[str]]]:
  """The gold and predicted tags of a conlleval input file.

  Args:
    path: a file (local or any tf.io.gfile scheme) of lines "<word> ... <gold> <predicted>",
      with empty lines (or lines starting with the field "-X-") between sentences. UTF-8.
    delimiter: the field separator; None splits at runs of spaces and tabs. With a delimiter
      every occurrence separates two fields (as conlleval's -d), trailing empty fields dropped.

  Returns:
    (gold, predicted): lists of sentences (lists of tags), empty sentences left out.

  Raises:
    ValueError: "path:line: ..." for a line whose number of fields differs from the first
      non-empty line's, or a token line with fewer than 2 fields; a file that is not UTF-8.
    OSError: the file cannot be read.
  """
  try:
    text = io.read_text(path)
  except UnicodeDecodeError as e:
    raise ValueError(f"{path}: not UTF-8 text ({e})") from e
  return parse_conll_predictions(text, path, delimiter)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """The command line; prints the conlleval report. Returns the exit status."""
  parser = argparse.ArgumentParser(
      prog="tagging_metrics",
      description="python -m bert_tf.tasks.tagging.metrics: the conlleval report of a file of "
                  "lines '<word> ... <gold tag> <predicted tag>' with empty lines between "
                  "sentences (like `conlleval < FILE`).")
  parser.add_argument("file", help="the predictions file; - reads standard input")
  parser.add_argument("--strict", action="store_true",
                      help="seqeval's strict mode (IOB2 or IOBES) instead of conlleval's rules")
  parser.add_argument("--scheme", choices=STRICT_SCHEMES, default=None,
                      help="with --strict: the tagging scheme (default: from the gold tags)")
  parser.add_argument("-d", "--delimiter", default=None,
                      help="the field separator (default: runs of spaces and tabs; '\\t' is "
                           "a tab)")
  args = parser.parse_args(argv)
  if args.scheme is not None and not args.strict:
    parser.error("--scheme needs --strict")
  delimiter = "\t" if args.delimiter == "\\t" else args.delimiter
  if delimiter == "":
    parser.error("the delimiter must not be empty")
  try:
    if args.file == "-":
      gold, predicted = parse_conll_predictions(sys.stdin.read(), "<stdin>", delimiter)
    else:
      gold, predicted = read_conll_predictions(args.file, delimiter)
    scores = evaluate(gold, predicted, mode=STRICT if args.strict else CONLLEVAL,
                      scheme=args.scheme)
  except (ValueError, OSError) as e:
    print(f"{parser.prog}: error: {e}", file=sys.stderr)
    return 1
  sys.stdout.write(conlleval_report(scores))
  return 0


if __name__ == "__main__":
  sys.exit(main())
