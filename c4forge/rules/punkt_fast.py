"""NLTK Punkt sentence splitting, several times faster, with byte-identical output.

``FastPunkt(reference).tokenize(text)`` returns exactly ``reference.tokenize(text)`` (NLTK's
``PunktSentenceTokenizer``, default ``realign_boundaries=True``). It is not a new algorithm:
it is NLTK's own ``span_tokenize`` restated without generators, plus exact shortcuts.

1. **No candidate, no work.** NLTK only considers a break where its period-context regex
   matches. Without a match ``_slices_from_text`` yields the single slice
   ``[0, len(text.rstrip()))`` and ``_realign_boundaries`` keeps it iff it is non-empty, so the
   answer is ``[text.rstrip()]`` or ``[]``. The regex starts with one end mark and needs
   something after it, so a text whose only end mark is its last character cannot match; that
   is checked with ``str.count`` before running the regex at all.
2. **Memoised decisions.** ``text_contains_sentbreak(context)`` is a pure function of the
   context string (the word before a candidate, the candidate, what follows), so it is
   cached per context. Below that, Punkt's decision for a token depends only on the token and
   its successor: the first pass looks at one token, the second pass at ``(token, next)``
   where ``next`` carries only its first-pass annotation, and line/paragraph-start flags are
   never read when tokenizing. So annotated tokens are cached per token string, with a
   verdict where the second pass cannot depend on ``next`` (``FastPunkt._verdict``), and the
   remaining second-pass verdicts per ``(token, next)`` pair. The annotation is NLTK's code.
   The commonest context shape, ``word. Next`` in ASCII letters and digits, is split into
   words without the word regex (traced by hand, and covered by the tests).
3. **No regex timeouts.** NLTK >= 3.10 wraps every regex in ``nltk.redos.TimedPattern``, which
   passes a wall-clock ``timeout`` to the ``regex`` engine on every call (≈ 7 µs each). We
   call the same compiled ``regex`` patterns directly; a timeout can only raise, never change
   a result, and these fixed patterns are linear in the input.

Safety net: the fast path is used only when the NLTK code it restates or relies on is
byte-for-byte the version it was checked against (``VERIFIED_NLTK_SOURCES``: a sha256 of the
sources in ``_restated_sources`` and of what builds the regexes) and a built-in set of tricky
lines splits identically; otherwise ``FastPunkt.create`` returns ``None`` with a warning and
callers use NLTK itself (same output, NLTK's speed). ``tests/test_punkt_fast.py`` compares
both on all the real data in the repo and on generated adversarial text.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import threading
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

# NLTK's sent_end_chars (part of the verified source hash).
_END_CHARS = (".", "?", "!")
# The commonest context, "word. Next": ASCII letters/digits, an end mark, spaces, ASCII
# letters/digits. Its word tokens are known without running the word regex (see use).
_SIMPLE_CONTEXT = re.compile(r"([A-Za-z0-9]+)([.?!]) +([A-Za-z0-9]+)")

_TOKEN_REGEXES = ("_RE_ELLIPSIS", "_RE_NUMERIC", "_RE_INITIAL", "_RE_ALPHA")

# Cached entries per table (contexts, tokens, token pairs). Measured: 11.5 MB for 58,205
# contexts, 16,888 tokens and 4,519 pairs (46,579 lines of the benchmark corpus), so full tables
# stay well under 100 MB a process. A full table is cleared: that costs time, never a result.
DEFAULT_CACHE_SIZE = 100_000


def _restated_sources() -> list[tuple[str, Any]]:
    from nltk.tokenize import punkt

    tok = punkt.PunktSentenceTokenizer
    return [
        # restated below (orchestration)
        ("tokenize", tok.tokenize),
        ("sentences_from_text", tok.sentences_from_text),
        ("span_tokenize", tok.span_tokenize),
        ("_slices_from_text", tok._slices_from_text),
        ("_match_potential_end_contexts", tok._match_potential_end_contexts),
        ("_get_last_whitespace_index", tok._get_last_whitespace_index),
        ("_realign_boundaries", tok._realign_boundaries),
        ("text_contains_sentbreak", tok.text_contains_sentbreak),
        ("_annotate_tokens", tok._annotate_tokens),
        ("_annotate_first_pass", punkt.PunktBaseClass._annotate_first_pass),
        ("_annotate_second_pass", tok._annotate_second_pass),
        ("_tokenize_words", punkt.PunktBaseClass._tokenize_words),
        ("word_tokenize", punkt.PunktLanguageVars.word_tokenize),
        ("_word_tokenizer_re", punkt.PunktLanguageVars._word_tokenizer_re),
        ("period_context_re", punkt.PunktLanguageVars.period_context_re),
        ("_pair_iter", punkt._pair_iter),
        # called as they are, but the caches rely on what they read and write
        ("_first_pass_annotation", punkt.PunktBaseClass._first_pass_annotation),
        ("_second_pass_annotation", tok._second_pass_annotation),
        ("_ortho_heuristic", tok._ortho_heuristic),
        ("PunktToken", punkt.PunktToken),
    ]


def nltk_source_sha256() -> str | None:
    """sha256 of the NLTK code that ``FastPunkt`` restates or relies on, and of the regular
    expressions it runs (``None`` when the source cannot be read, e.g. a bytecode-only
    install)."""
    from nltk.tokenize import punkt

    h = hashlib.sha256()
    try:
        for name, obj in _restated_sources():
            h.update(name.encode() + b"\0" + inspect.getsource(obj).encode("utf-8") + b"\0")
    except (OSError, TypeError, AttributeError):
        return None
    # The language regexes are hashed through what builds them: their pattern strings are not
    # stable across processes (NLTK joins a set of end marks, in hash-seed order).
    lv = punkt.PunktLanguageVars
    h.update(
        repr(
            (
                lv._period_context_fmt,
                lv._word_tokenize_fmt,
                lv._re_word_start,
                lv._re_multi_char_punct,
                lv.sent_end_chars,
                punkt.PunktSentenceTokenizer.PUNCTUATION,
            )
        ).encode()
    )
    for prop in (lv._re_sent_end_chars, lv._re_non_word_chars):
        h.update(inspect.getsource(prop.fget).encode("utf-8"))
    for rx in (lv.re_boundary_realignment, *(getattr(punkt.PunktToken, n) for n in _TOKEN_REGEXES)):
        rx = _raw(rx)
        h.update(f"{rx.pattern}\0{rx.flags}\0{type(rx).__module__}\0".encode())
    return h.hexdigest()


# NLTK sources the restatement was checked against, line by line and by tests/test_punkt_fast.py
# (nltk 3.10.4, the version c4_rules.md §7 pins the reference expectations to).
VERIFIED_NLTK_SOURCES = frozenset(
    {
        "d124897462b9959bc7baa482644052c2e199d72064b30d8542641baae189e8db",
    }
)

# Lines whose splitting exercises every branch (abbreviations, initials, numbers, ellipses,
# realigned quotes and brackets, collocations, sentence starters, newlines, odd whitespace).
SELF_CHECK_LINES = (
    "",
    "   ",
    "One sentence.",
    "  Leading space kept. Trailing space dropped.  \u3000",
    "Dr. Smith went to see Mr. Jones at noon.",
    "Another sentence. . . ? ? ! ! !",
    "Growth was 3.5 percent last year. It rose.",
    "This is a line with sentences...but it's actually just 1.",
    'He said "Stop." Then he left. (It was late.) Nobody saw it.',
    "J. R. R. Tolkien wrote it. J. Bach too. See p. 5. And the U.S. Army.",
    "Very bad acting!!! I promise. What?! Really?!",
    "It ended on Jan. 5. The next day... Nothing happened. So it goes.",
    "The 2nd. edition. The 3. point is here. No. 7 is last.",
    "A first line.\nA second line. It ends here.\n\n  New paragraph.",
    "\u201cQuoted.\u201d Next one. \u00abGuillemets.\u00bb Done\u2019s it. [Bracket.] End.",
    "Weird\x1cseparators.\x1d Here.\u2028Line sep. Tab.\tNext.",
    "e.g. this and i.e. that. Etc. and so on.",
    "Mr.Smith.Mrs.Smith. Final -- dash. Also--this. Yes.",
)


class FastPunkt:
    """Drop-in for ``reference.tokenize`` (see the module docstring for why it is exact)."""

    def __init__(
        self, reference: PunktSentenceTokenizer, cache_size: int = DEFAULT_CACHE_SIZE
    ) -> None:
        lang_vars = reference._lang_vars
        self.reference = reference
        self._finditer = _raw(lang_vars.period_context_re()).finditer
        self._findall = _raw(lang_vars._word_tokenizer_re()).findall
        self._realign_match = _raw(lang_vars.re_boundary_realignment).match
        self._token = _raw_token_class(reference._Token)
        self._first_pass = reference._first_pass_annotation
        self._second_pass = reference._second_pass_annotation
        self._collocation_firsts = frozenset(a for a, _ in reference._params.collocations)
        self._cache_size = cache_size
        self._contexts: dict[str, bool] = {}
        self._tokens: dict[str, tuple[Any, bool | None]] = {}
        self._pairs: dict[tuple[str, str], bool] = {}
        # The second pass annotates a cached token in place (then we restore it): one thread
        # at a time, so a concurrent reader never sees the temporary state.
        self._lock = threading.Lock()
        self.calls = 0  # tokenize() calls, and those answered by shortcut 1 (for benchmarks)
        self.no_candidate = 0

    @classmethod
    def create(
        cls, reference: PunktSentenceTokenizer, cache_size: int = DEFAULT_CACHE_SIZE
    ) -> FastPunkt | None:
        """A checked ``FastPunkt``, or ``None`` (with a warning) when it cannot be trusted for
        the installed NLTK, so callers fall back to ``reference.tokenize``."""
        digest = nltk_source_sha256()
        if digest not in VERIFIED_NLTK_SOURCES:
            warnings.warn(
                f"c4forge fast Punkt disabled: the installed NLTK's Punkt code (sha256 {digest}) "
                "is not the version it was verified against; sentence splitting falls back to "
                "NLTK itself (same output, slower). Run tests/test_punkt_fast.py against this "
                "NLTK and add the hash to VERIFIED_NLTK_SOURCES if it passes.",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        fast = cls(reference, cache_size)
        bad = [s for s in SELF_CHECK_LINES if fast.tokenize(s) != reference.tokenize(s)]
        if bad:
            warnings.warn(
                f"c4forge fast Punkt disabled: it disagrees with NLTK on {bad[0]!r}; sentence "
                "splitting falls back to NLTK itself.",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        fast.clear_caches()
        return fast

    def clear_caches(self) -> None:
        with self._lock:
            self._contexts.clear()
            self._tokens.clear()
            self._pairs.clear()
        self.calls = self.no_candidate = 0

    def cache_sizes(self) -> dict[str, int]:
        return {
            "contexts": len(self._contexts),
            "tokens": len(self._tokens),
            "pairs": len(self._pairs),
        }

    # ---------------------------------------------------------------- tokenize

    def tokenize(self, text: str) -> list[str]:
        """``reference.tokenize(text)``: NLTK's ``span_tokenize`` → ``_slices_from_text`` →
        ``_realign_boundaries``, each step restated in order (NLTK's names in comments)."""
        self.calls += 1
        if text.endswith(_END_CHARS) and sum(map(text.count, _END_CHARS)) == 1:
            # Shortcut 1a: the period-context regex starts with one end mark and looks at
            # what follows it; the only end mark is the last character, so no match.
            self.no_candidate += 1
            return [text]
        matches = self._finditer(text)
        match = next(matches, None)
        if match is None:
            # Shortcut 1. _slices_from_text yields only slice(0, len(text.rstrip()));
            # _realign_boundaries pairs it with None and yields it iff text[slice] != "".
            self.no_candidate += 1
            stripped = text.rstrip()
            return [stripped] if stripped else []

        contexts = self._contexts
        rfind = text.rfind
        # _get_last_whitespace_index looks for string.whitespace; most lines hold only " ".
        other_ws = "\t" in text or "\n" in text or "\r" in text or "\x0b" in text or "\x0c" in text
        # _slices_from_text over _match_potential_end_contexts
        slices: list[tuple[int, int]] = []
        last_break = 0
        prev = None  # previous_match
        prev_start = prev_stop = 0  # previous_slice (the word before previous_match)
        while match is not None:
            start = match.start()
            # _get_last_whitespace_index(text[prev_stop:start]): index of the last ASCII
            # whitespace in that span, where "found at relative index 0" counts as not found.
            ws = rfind(" ", prev_stop, start)
            if other_ws:
                ws = max(
                    ws,
                    rfind("\t", prev_stop, start),
                    rfind("\n", prev_stop, start),
                    rfind("\r", prev_stop, start),
                    rfind("\x0b", prev_stop, start),
                    rfind("\x0c", prev_stop, start),
                )
            word_start = ws + 1 if ws > prev_stop else prev_start
            # A candidate is yielded once the next one's word does not overlap its own.
            # (NLTK tests `if previous_match`; regex/re match objects are always truthy.)
            if prev is not None and prev_stop <= word_start:
                # context = text[previous_slice] + match.group() + match.group("after_tok")
                after_tok, next_tok = prev.groups()
                end = prev.end()
                context = text[prev_start:end] + after_tok
                brk = contexts.get(context)
                if brk is None:
                    brk = self._context_has_break(context)
                if brk:
                    slices.append((last_break, end))
                    # next sentence starts after whitespace, or at the following punctuation
                    last_break = prev.start("next_tok") if next_tok else end
            prev, prev_start, prev_stop = match, word_start, start
            match = next(matches, None)
        # the last candidate is always yielded
        after_tok, next_tok = prev.groups()
        end = prev.end()
        context = text[prev_start:end] + after_tok
        brk = contexts.get(context)
        if brk is None:
            brk = self._context_has_break(context)
        if brk:
            slices.append((last_break, end))
            last_break = prev.start("next_tok") if next_tok else end
        # "The last sentence should not contain trailing whitespace."
        slices.append((last_break, len(text.rstrip())))

        # _realign_boundaries over _pair_iter(slices)
        out: list[str] = []
        realign = 0
        last = len(slices) - 1
        for i in range(last):
            start1, stop1 = slices[i]
            start1 += realign
            start2, stop2 = slices[i + 1]
            m = self._realign_match(text[start2:stop2])
            if m is not None:  # NLTK: `if m:`, always true for a match object
                out.append(text[start1 : start2 + len(m.group(0).rstrip())])
                realign = m.end()
            else:
                realign = 0
                sentence = text[start1:stop1]
                if sentence:
                    out.append(sentence)
        start1, stop1 = slices[last]
        sentence = text[start1 + realign : stop1]
        if sentence:
            out.append(sentence)
        return out

    # ------------------------------------------------------- cached decisions

    def _context_has_break(self, context: str) -> bool:
        """``reference.text_contains_sentbreak(context)``: some token other than the last is
        a sentence break after both annotation passes."""
        # _tokenize_words: word_tokenize each line of the context that is not blank.
        words = simple_context_words(context)
        if words is None:
            if "\n" in context:
                words = []
                for line in context.split("\n"):
                    if line.strip():
                        words.extend(self._findall(line))
            else:
                words = self._findall(context) if context.strip() else []
        tokens = self._tokens
        found = False
        for i in range(len(words) - 1):
            entry = tokens.get(words[i])
            brk = entry[1] if entry is not None else self._annotated(words[i])[1]
            if brk is None:  # depends on the next token
                pair = (words[i], words[i + 1])
                brk = self._pairs.get(pair)
                if brk is None:
                    brk = self._pair_is_break(pair)
            if brk:
                found = True
                break
        contexts = self._contexts
        if len(contexts) >= self._cache_size:
            contexts.clear()
        contexts[context] = found
        return found

    def _annotated(self, word: str) -> tuple[Any, bool | None]:
        """``(PunktToken after NLTK's first pass, verdict)``, both functions of the string
        alone. The verdict is whether the token ends a sentence whatever follows it, or
        ``None`` when the second pass may depend on the next token."""
        with self._lock:
            entry = self._tokens.get(word)
            if entry is None:
                tok = self._token(word)
                self._first_pass(tok)
                entry = (tok, self._verdict(tok))
                if len(self._tokens) >= self._cache_size:
                    self._tokens.clear()
                self._tokens[word] = entry
        return entry

    def _verdict(self, tok: Any) -> bool | None:
        """Where NLTK's ``_second_pass_annotation(tok, next)`` cannot change ``tok.sentbreak``,
        whatever ``next`` is: it returns at once for a token without a final period; for a
        first-pass break that is not an abbreviation, ellipsis, initial or number, the only
        rule left that reads ``next`` is the collocation test, which needs ``tok``'s type to
        start a known collocation."""
        if not tok.period_final:
            return bool(tok.sentbreak)
        if (
            tok.sentbreak
            and not tok.abbr
            and not tok.ellipsis
            and not tok.is_initial
            and tok.type_no_period != "##number##"
            and tok.type_no_period not in self._collocation_firsts
        ):
            return True
        return None

    def _pair_is_break(self, pair: tuple[str, str]) -> bool:
        """Is ``pair[0]`` a sentence break when followed by ``pair[1]``? NLTK's second pass of
        ``(token, next)`` reads ``next``'s first-pass state only and writes nothing but the
        token's ``sentbreak`` and ``abbr``, which we restore, so the cached token stays a
        first-pass token."""
        tok = self._annotated(pair[0])[0]
        nxt = self._annotated(pair[1])[0]
        with self._lock:
            sentbreak, abbr = tok.sentbreak, tok.abbr
            self._second_pass(tok, nxt)
            brk = bool(tok.sentbreak)
            tok.sentbreak, tok.abbr = sentbreak, abbr
            if len(self._pairs) >= self._cache_size:
                self._pairs.clear()
            self._pairs[pair] = brk
        return brk


def simple_context_words(context: str) -> list[str] | None:
    """NLTK's ``word_tokenize(context)`` for the shape ``word<end mark><spaces>word`` in ASCII
    letters and digits, without the regex; ``None`` for any other shape.

    Traced through ``_word_tokenize_fmt``: a letter/digit run continues through "." (not a
    non-word char; "." + space + letter is not multi-char punctuation) and stops at the
    space, so "word." is one token; "?" and "!" are non-word chars, so the run stops before
    them and they form their own token; spaces start no token; the last run ends at $."""
    simple = _SIMPLE_CONTEXT.fullmatch(context)
    if simple is None:
        return None
    word, mark, following = simple.groups()
    return [word + mark, following] if mark == "." else [word, mark, following]


def _raw(pattern: Any) -> Any:
    """The compiled ``regex`` pattern inside an ``nltk.redos.TimedPattern`` (the pattern
    itself on NLTK versions that compile with ``re`` directly)."""
    inner = getattr(pattern, "_rx", None)
    return inner if inner is not None else pattern


def _raw_token_class(base: type) -> type:
    """``base`` (``PunktToken``) with its class-level regexes unwrapped; every method is
    NLTK's."""
    attrs: dict[str, Any] = {"__slots__": ()}
    for name in _TOKEN_REGEXES:
        if hasattr(base, name):
            attrs[name] = _raw(getattr(base, name))
    return type("RawRegexPunktToken", (base,), attrs)
