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
	// OutcomeBusy: the event is open but another worker holds it right now (its row lock, or an
	// unexpired lease); nothing was written. Ask again later.
	OutcomeBusy
	// OutcomeMissing: no event has this id.
	OutcomeMissing
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
	}
	return "unknown"
}
