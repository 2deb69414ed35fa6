"""Dressing: a training request said the way people say things, around the operation's own sentence.

An op's phrasings are one clean sentence naming the inputs and the output. Requests people write come
with a reason, a remark that has nothing to do with the work, a terse lowercase line, a typo. Trained
only on the clean sentences, the bundled model reads the extra words as part of the operation: on the
transfer dev set's chatty requests it ran the pipeline of the nearest template ("The meetup was great
btw" got `sort | uniq -c | sort -rn | head -n 1`). `dress` wraps a training request in some of these.

What it never touches: a fact (a file name, a number, a value the checks compare) and anything quoted,
so the verifier's expectation is the request's. The typo goes into a lowercase word of the phrasing's own
text. Held-out requests are never dressed (`generate_family` dresses the train split only), so the
template-held-out set stays the measurement it was. The words here are this module's own; none comes
from the transfer dev set, and the no-overlap test holds them to that.
"""

from __future__ import annotations

import random
import re

DRESS_RATE = 0.5  # share of training requests (levels 2-5, op-rendered) that are dressed

# said before the request: why, or how the person opens
REASONS = [
    "Quick one.", "Hi!", "Hey,", "Small favour:", "Okay, next thing.", "Sorry, one more.",
    "I'm tidying up before the release.", "A colleague asked me for this.", "This is for tomorrow's standup.",
    "The cron box is down, so by hand today:", "Before I forget:", "Need this for a report.",
    "My script downstream expects this.", "Following up on this morning:", "So,",
]
# said after it: thanks, or a remark the work does not depend on
ASIDES = [
    "Thanks!", "Thanks a lot.", "No rush.", "Cheers.", "Ping me if something looks off.",
    "It's been a long week.", "I'd do it myself but I'm on my phone.", "Sorry for the short notice.",
    "Don't ask why.", "Much appreciated.", "Lunch is on me.",
]
# which parts a dressed request gets: (reason, aside, terse, typo)
STYLES = [
    (True, False, False, False), (False, True, False, False), (True, True, False, False),
    (False, False, True, False), (False, False, False, True), (True, False, False, True),
    (False, True, True, False),
]

_UNTOUCHABLE = re.compile(r"\{[^}]*\}|`[^`]*`|\"[^\"]*\"|'[^'\s][^']*'(?!\w)")
_WORD = re.compile(r"(?<![\w.\-/])[a-z]{5,}(?![\w.\-/])")


def typo(template: str, rng: random.Random) -> str:
    """Two neighbouring inner letters of one plain word swapped; placeholders, `code` and quotes untouched."""
    masked = _UNTOUCHABLE.sub(lambda m: "\0" * len(m.group()), template)
    words = [m for m in _WORD.finditer(masked) if len(set(m.group()[1:-1])) > 1]
    if not words:
        return template
    w = rng.choice(words)
    spots = [i for i in range(w.start() + 1, w.end() - 2) if template[i] != template[i + 1]]
    i = rng.choice(spots)
    return template[:i] + template[i + 1] + template[i] + template[i + 2:]


def dress(template: str, rng: random.Random) -> tuple[str, str, str]:
    """A drawn style for the request of `template`: (the template, terse or with a typo; what goes before the
    request; what goes after it). The template is changed, not the request, so no fact is touched."""
    reason, aside, terse, misspelt = rng.choice(STYLES)
    if misspelt:
        template = typo(template, rng)
    if terse:
        if template[:1].isupper() and template[1:2].islower():
            template = template[0].lower() + template[1:]
        if template.endswith(".") and not template.endswith(".."):
            template = template[:-1]
    return template, rng.choice(REASONS) if reason else "", rng.choice(ASIDES) if aside else ""
