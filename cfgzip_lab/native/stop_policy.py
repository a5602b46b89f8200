"""How a matcher reads a stop token: XGrammar's stop-token policy, per release and option.

XGrammar reads a stop id in two ways (``cpp/grammar_matcher.cc``: ``AcceptStopToken``,
``CanAcceptStopTokenAsTerminal``, the stop-token loop at the end of ``SetTokenBitmask``; read,
not copied):

- as the **signal**: taken when the grammar is complete, unless the matcher was made with
  ``terminate_without_stop_token`` (then never); the matcher terminates;
- from 0.2.9 also as **text**: the id's decoded bytes (``TokenizerInfo.decoded_vocab``, an
  overridden stop id's text included), taken like any token's bytes when they are not empty and
  *complete* the grammar. The signal is tried first. A stop id taken as text terminates the
  matcher too (``stop_token_is_accepted_ = is_stop_token``).

Its bit in the next-token mask is ``signal or text`` under 0.2.9. Under 0.2.8 it is set when the
grammar is complete, in either mode: 0.2.8 shows a stop token that ``terminate_without_stop_token``
then refuses. With ``terminate_without_stop_token`` the matcher *is terminated* as soon as the
grammar is complete (``IsTerminated``), yet it still fills masks and takes the tokens the grammar
allows; only an accepted stop token ends it.

cfgzip's own vocabularies (:class:`cfgzip_lab.vocab.VocabTable`) blank the stop ids' bytes, as the
tables they hand XGrammar do, so the text reading never arises there: :data:`SIGNAL_ONLY` is their
policy. :func:`cfgzip_lab.native.from_xgrammar.native_matcher` builds one from an XGrammar
``TokenizerInfo``, whose stop ids keep their text.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SIGNAL_ONLY", "StopPolicy"]


@dataclass(frozen=True)
class StopPolicy:
    """What a stop id means to one matcher.

    Parameters
    ----------
    texts
        Stop id → its decoded bytes, for the ids whose text the grammar may take (non-empty).
    terminate_without_stop_token
        XGrammar's option: the matcher ends when the grammar is complete, and refuses the signal.
    stops_as_text
        Whether the installed XGrammar reads a stop id's text (0.2.9 and newer).
    """

    texts: dict[int, bytes]
    terminate_without_stop_token: bool = False
    stops_as_text: bool = False

    def signal_allowed(self, completed: bool) -> bool:
        """Whether a stop id is taken as the signal in a state that is (or is not) complete."""
        return completed and not self.terminate_without_stop_token

    def mask_may_differ(self, completed: bool) -> bool:
        """Whether a stop bit may be other than ``completed`` (the stop class's bit in a state's row)."""
        if not self.stops_as_text:
            return False
        return (completed and self.terminate_without_stop_token) or (not completed and bool(self.texts))

    def mask_bit(self, completed: bool, text_completes: bool) -> bool:
        """The stop id's bit in the mask, given whether its text would complete the grammar."""
        if not self.stops_as_text:
            return completed
        return self.signal_allowed(completed) or text_completes


#: The policy of cfgzip's own vocabularies: the signal only, the matcher waits for a stop token.
SIGNAL_ONLY = StopPolicy({})
