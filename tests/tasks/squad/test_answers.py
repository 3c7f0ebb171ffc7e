"""bert_tf.tasks.squad.answers on its own: get_final_text's projection and the prediction files'
JSON text (predictions from converted windows, against the original's loops: squad/test_data.py).
"""

import json

from hypothesis import example, given, settings, strategies as st

from bert_tf.tasks.squad import answers as sa


def test_get_final_text_projects_back_to_the_original_words():
  assert sa.get_final_text("steve smith", "Steve Smith's", True) == "Steve Smith"
  assert sa.get_final_text("1895", "(1895-1943).", True) == "1895"
  assert sa.get_final_text("Smith", "Smith's", False) == "Smith"
  # Precomposed é: stripping its accent keeps the length, so the projection works.
  assert sa.get_final_text("cafe", "Café au", True) == "Café"
  # Decomposed e + U+0301: lower-casing drops the mark, lengths differ -> the whole words.
  assert sa.get_final_text("cafe", "Cafe\u0301 au", True) == "Cafe\u0301 au"
  # [UNK] is never found in the BasicTokenizer's text -> the whole words.
  assert sa.get_final_text("[UNK] smith", "\u2603 Smith", True) == "\u2603 Smith"
  assert sa.get_final_text("", "Smith", True) == "Smith"


_JSON_SCALARS = st.one_of(st.text(), st.floats(allow_nan=True, allow_infinity=True),
                          st.integers(-2 ** 70, 2 ** 70), st.booleans(), st.none())


@settings(max_examples=200, deadline=None)
@given(obj=st.recursive(_JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.text(), st.integers(), st.floats(allow_nan=False), st.none(),
                              st.booleans()), inner, max_size=4)), max_leaves=20))
def test_the_fast_json_writer_equals_json_dumps_indent_4(obj):
  assert sa.dumps_indent4(obj) == json.dumps(obj, indent=4)


_NBEST_VALUE = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(-1e308, 1e308),
                         st.integers(-3, 3), st.text(max_size=5), st.none())


@st.composite
def _nbest_lists(draw):
  # Mostly well-formed n-best entries (the per-list format path), some with a value of another
  # type, a non-finite or huge float, or keys missing or out of order (the general path).
  entries = []
  for _ in range(draw(st.integers(0, 5))):
    entry = {"text": draw(st.one_of(st.text(), st.text(), _NBEST_VALUE))}
    for key in ("probability", "start_logit", "end_logit"):
      entry[key] = draw(st.one_of(st.floats(-50, 50), st.floats(-50, 50), _NBEST_VALUE))
    if draw(st.integers(0, 9)) == 0:
      entry = dict(reversed(list(entry.items())))
    entries.append(entry)
  return entries


def _entry(text, *numbers):
  return dict(zip(("text", "probability", "start_logit", "end_logit"), (text,) + numbers))


@settings(max_examples=300, deadline=None)
@given(nbest=st.dictionaries(st.text(max_size=3), _nbest_lists(), max_size=4))
@example(nbest={"a": [_entry("x", 0.5, 1.0, 2.0), _entry("y", 0.5, float("nan"), 2.0)]})
@example(nbest={"b": [_entry("x\u00e9", 0.5, float("inf"), 2.0)],
                "c": [_entry("", 1e308, 1e308, -1e-320)]})
@example(nbest={"d": [_entry("%s %r", 0.1, -0.0, 3.0)], "e": [], "f": [_entry("z", 1, 2.0, 3.0)]})
def test_nbest_lists_are_written_as_json_dumps_indent_4(nbest):
  assert sa.dumps_indent4(nbest) == json.dumps(nbest, indent=4)
