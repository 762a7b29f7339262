package exactlyonce

// Outcome is what one attempt to process an event did. It is not a State: a state is where an
// event is in its life (pending, processing, processed); an outcome is what one worker's attempt
// found and did, and it is reported to that worker only.
type Outcome int

const (
	// OutcomeSettled: this attempt settled the event (gave it its value and moved it to a settled
	// state). Exactly one attempt ever gets it for an event.
	OutcomeSettled Outcome = iota + 1
	// OutcomeAlreadySettled: the event was settled before; nothing was written.
	OutcomeAlreadySettled
	// OutcomeBusy: the event is open but not settled by this attempt: another worker holds it right
	// now (its row lock, or an unexpired lease), or this attempt's work failed and the event waits its
	// backoff. Ask again later.
	OutcomeBusy
	// OutcomeMissing: no event has this id.
	OutcomeMissing
	// OutcomeFailed: this attempt's work failed for the last allowed time; the event is settled as
	// failed, with the error, and never tried again.
	OutcomeFailed
	// OutcomeDeferred: the event is a task that the database itself will bring back to a worker: it
	// is queued behind an earlier task of its reference, or waits its backoff (this attempt's
	// delivery failed, or an earlier one's). Its message can be acknowledged: the agents claim it
	// when it is due, and the settlement of the task before it hands it on.
	OutcomeDeferred
)

func (o Outcome) String() string {
	switch o {
	case OutcomeSettled:
		return "settled"
	case OutcomeAlreadySettled:
		return "already settled"
	case OutcomeBusy:
		return "busy"
	case OutcomeMissing:
		return "missing"
	case OutcomeFailed:
		return "failed"
	case OutcomeDeferred:
		return "deferred"
	}
	return "unknown"
}
