package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	// Every replica must compute the same weekly openings whatever the
	// machine's zone database holds (or lacks): embed Go's.
	_ "time/tzdata"

	"lehr.dev/lehr/proto/lehrpb"
)

// Bounds of freeze windows.
const (
	MaxFreezeWindows      = 100
	MaxFreezeReasonBytes  = 200
	MaxFreezeWindowLength = 90 * 24 * time.Hour
	// MaxWeeklyLength bounds WeeklyWindow.length: a window open for a
	// whole week never closes (pause rollouts instead).
	MaxWeeklyLength = 7 * 24 * time.Hour
)

// weekdays maps WeeklyWindow.days to Go's weekdays.
var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

const allowedDays = "mon, tue, wed, thu, fri, sat or sun"

func checkFreezeWindows(field string, ws []*lehrpb.FreezeWindow) error {
	if len(ws) > MaxFreezeWindows {
		return fieldErr(field, "%d windows; at most %d allowed", len(ws), MaxFreezeWindows)
	}
	for i, w := range ws {
		f := fmt.Sprintf("%s[%d]", field, i)
		if len(w.GetReason()) > MaxFreezeReasonBytes {
			return fieldErr(f+".reason", "%d bytes; at most %d allowed", len(w.GetReason()), MaxFreezeReasonBytes)
		}
		if wk := w.GetWeekly(); wk != nil {
			if w.GetStart() != nil || w.GetEnd() != nil {
				return fieldErr(f, "a window is either weekly or has a start and an end, not both")
			}
			if _, err := parseWeekly(f+".weekly", wk); err != nil {
				return err
			}
			continue
		}
		if w.GetStart() == nil || w.GetEnd() == nil {
			return fieldErr(f, "a freeze window needs a start and an end (RFC 3339 times), or weekly")
		}
		if err := w.GetStart().CheckValid(); err != nil {
			return fieldErr(f+".start", "not a valid time: %v", err)
		}
		if err := w.GetEnd().CheckValid(); err != nil {
			return fieldErr(f+".end", "not a valid time: %v", err)
		}
		start, end := w.GetStart().AsTime(), w.GetEnd().AsTime()
		if !end.After(start) {
			return fieldErr(f+".end", "%s is not after start %s", end.Format(time.RFC3339), start.Format(time.RFC3339))
		}
		if end.Sub(start) > MaxFreezeWindowLength {
			return fieldErr(f+".end", "the window lasts %v; at most %v allowed (a longer freeze is a policy without rollouts: pause them)", end.Sub(start), MaxFreezeWindowLength)
		}
	}
	return nil
}

// weekly is a validated WeeklyWindow.
type weekly struct {
	days         []time.Weekday
	hour, minute int
	length       time.Duration
	loc          *time.Location
}

func parseWeekly(field string, wk *lehrpb.WeeklyWindow) (weekly, error) {
	var w weekly
	if len(wk.GetDays()) == 0 {
		return w, fieldErr(field+".days", "at least one day is required: %s", allowedDays)
	}
	for i, d := range wk.GetDays() {
		wd, ok := weekdays[strings.ToLower(d)]
		if !ok {
			return w, fieldErr(fmt.Sprintf("%s.days[%d]", field, i), "%q is not a day; want %s", d, allowedDays)
		}
		if slices.Contains(w.days, wd) {
			return w, fieldErr(fmt.Sprintf("%s.days[%d]", field, i), "%q is listed twice", d)
		}
		w.days = append(w.days, wd)
	}
	at, err := time.Parse("15:04", wk.GetAt())
	if err != nil {
		return w, fieldErr(field+".at", "%q is not a local time; want HH:MM on a 24-hour clock, e.g. 16:00", wk.GetAt())
	}
	w.hour, w.minute = at.Hour(), at.Minute()
	if err := wk.GetLength().CheckValid(); err != nil || wk.GetLength() == nil {
		return w, fieldErr(field+".length", "a length is required, e.g. 64h")
	}
	w.length = wk.GetLength().AsDuration()
	if w.length <= 0 || w.length >= MaxWeeklyLength {
		return w, fieldErr(field+".length", "%v; want above 0 and under %v", w.length, MaxWeeklyLength)
	}
	w.loc = time.UTC
	if tz := wk.GetTimeZone(); tz != "" {
		if w.loc, err = time.LoadLocation(tz); err != nil {
			return w, fieldErr(field+".time_zone", "%q is not an IANA time zone (e.g. Europe/Berlin, America/New_York): %v", tz, err)
		}
	}
	return w, nil
}

// openUntil returns when the latest opening of w that covers now closes.
// An opening is at most a week long, so only the openings of the last
// seven local days (and today) can cover now.
func (w weekly) openUntil(now time.Time) (time.Time, bool) {
	local := now.In(w.loc)
	var until time.Time
	for back := 0; back <= 7; back++ {
		day := local.AddDate(0, 0, -back)
		if !slices.Contains(w.days, day.Weekday()) {
			continue
		}
		// time.Date moves a wall time the clock skips forward past the gap.
		open := time.Date(day.Year(), day.Month(), day.Day(), w.hour, w.minute, 0, 0, w.loc)
		end := open.Add(w.length)
		if !now.Before(open) && now.Before(end) && end.After(until) {
			until = end
		}
	}
	return until, !until.IsZero()
}

// Frozen returns the freeze window of p open at now, if any, and when it
// closes (the window that closes last, when several are open). p must have
// passed Validate; a window that does not parse is ignored.
func Frozen(p *lehrpb.RolloutPolicy, now time.Time) (*lehrpb.FreezeWindow, time.Time, bool) {
	var (
		open  *lehrpb.FreezeWindow
		until time.Time
	)
	for _, fw := range p.GetFreezeWindows() {
		var end time.Time
		if wk := fw.GetWeekly(); wk != nil {
			w, err := parseWeekly("", wk)
			if err != nil {
				continue
			}
			if e, ok := w.openUntil(now); ok {
				end = e
			}
		} else if !now.Before(fw.GetStart().AsTime()) && now.Before(fw.GetEnd().AsTime()) {
			end = fw.GetEnd().AsTime()
		}
		if !end.IsZero() && end.After(until) {
			open, until = fw, end
		}
	}
	return open, until, open != nil
}

// DescribeFreeze says when fw is open, for operators: "2026-12-23T00:00:00Z
// → 2027-01-02T00:00:00Z" or "every fri, sat at 16:00 Europe/Berlin for
// 40h0m0s".
func DescribeFreeze(fw *lehrpb.FreezeWindow) string {
	if wk := fw.GetWeekly(); wk != nil {
		tz := wk.GetTimeZone()
		if tz == "" {
			tz = "UTC"
		}
		return fmt.Sprintf("every %s at %s %s for %v", strings.Join(wk.GetDays(), ", "), wk.GetAt(), tz, wk.GetLength().AsDuration())
	}
	return fw.GetStart().AsTime().UTC().Format(time.RFC3339) + " → " + fw.GetEnd().AsTime().UTC().Format(time.RFC3339)
}
