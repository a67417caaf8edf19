package metricsource

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The placeholders of a query template.
const (
	// Population is replaced by the label matchers of one population of
	// one trial: host=~"h1|h2",zone="zone-a". It must stand inside a
	// selector's braces, alone or beside other matchers.
	Population = "$population"
	// Interval is replaced by the evaluation's interval as a PromQL
	// duration ("10s"): the window of rate or increase, so that each
	// point covers one interval.
	Interval = "$interval"
)

// Defaults of the label names (lehrpb.CanaryAnalysis host_label and
// zone_label).
const (
	DefaultHostLabel = "host"
	DefaultZoneLabel = "zone"
	// NoZoneLabel as a zone label says the series carry none: hosts are
	// matched by their host label alone.
	NoZoneLabel = "-"
)

// MaxTemplateBytes bounds a query template.
const MaxTemplateBytes = 4096

var (
	placeholder = regexp.MustCompile(`\$[A-Za-z_][A-Za-z0-9_]*`)
	labelName   = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// CheckTemplate says what is wrong with a query template, in words that
// name what is allowed: it must contain $population inside a selector's
// braces, no placeholder but $population and $interval, and balanced
// brackets outside its strings. It does not parse PromQL (Lehr does not
// link Prometheus's parser): the source refuses what else is wrong, and
// the check then gives NONE with its message.
func CheckTemplate(tmpl string) error {
	const example = `e.g. sum by (host) (increase(http_requests_total{job="shop",$population}[$interval]))`
	if strings.TrimSpace(tmpl) == "" {
		return fmt.Errorf("empty; want a PromQL query with %s, %s", Population, example)
	}
	if len(tmpl) > MaxTemplateBytes {
		return fmt.Errorf("%d bytes; at most %d", len(tmpl), MaxTemplateBytes)
	}
	for _, p := range placeholder.FindAllString(tmpl, -1) {
		if p != Population && p != Interval {
			return fmt.Errorf("unknown placeholder %s; the placeholders are %s (the population's label matchers) and %s (the evaluation's interval)", p, Population, Interval)
		}
	}
	if !strings.Contains(tmpl, Population) {
		return fmt.Errorf("no %s: Lehr fills in which hosts each query is about, so every selector of the hosts' series needs it inside its braces, %s", Population, example)
	}
	// Brackets balance outside strings, and $population stands where a
	// matcher may: after '{' or ',' and before '}' or ','.
	var stack []byte
	for i := 0; i < len(tmpl); i++ {
		c := tmpl[i]
		switch c {
		case '"', '\'', '`':
			j := i + 1
			for ; j < len(tmpl) && tmpl[j] != c; j++ {
				if tmpl[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(tmpl) {
				return fmt.Errorf("a string opened at byte %d is not closed", i)
			}
			i = j
		case '(', '[', '{':
			stack = append(stack, c)
		case ')', ']', '}':
			open := map[byte]byte{')': '(', ']': '[', '}': '{'}[c]
			if len(stack) == 0 || stack[len(stack)-1] != open {
				return fmt.Errorf("%q at byte %d closes nothing open", string(c), i)
			}
			stack = stack[:len(stack)-1]
		case '$':
			if !strings.HasPrefix(tmpl[i:], Population) {
				continue
			}
			before := strings.TrimRight(tmpl[:i], " \t\n")
			after := strings.TrimLeft(tmpl[i+len(Population):], " \t\n")
			if len(stack) == 0 || stack[len(stack)-1] != '{' || !strings.HasSuffix(before, "{") && !strings.HasSuffix(before, ",") ||
				!strings.HasPrefix(after, "}") && !strings.HasPrefix(after, ",") {
				return fmt.Errorf("%s at byte %d is not a matcher inside a selector's braces: write metric{%s} or metric{job=\"shop\",%s}", Population, i, Population, Population)
			}
		}
	}
	if len(stack) > 0 {
		return fmt.Errorf("%q is not closed", string(stack[len(stack)-1]))
	}
	return nil
}

// CheckLabel says what is wrong with a host or zone label name ("" is
// the default; "-" is allowed for a zone label).
func CheckLabel(name string, zone bool) error {
	if name == "" || zone && name == NoZoneLabel || labelName.MatchString(name) {
		return nil
	}
	if zone {
		return fmt.Errorf("%q is not a label name (letters, digits, '_', not starting with a digit); \"\" means %q, %q that the series carry no zone", name, DefaultZoneLabel, NoZoneLabel)
	}
	return fmt.Errorf("%q is not a label name (letters, digits, '_', not starting with a digit); \"\" means %q", name, DefaultHostLabel)
}

// Selection is one population of one trial: the hosts a query is about.
type Selection struct {
	// HostLabel and ZoneLabel name the series' labels; "" means the
	// defaults, ZoneLabel NoZoneLabel none.
	HostLabel, ZoneLabel string
	// Zone is the trial's zone.
	Zone string
	// Hosts are the host ids, at least one.
	Hosts []string
}

// Matchers returns the label matchers that stand for s:
// host=~"h1|h2",zone="zone-a", the host ids quoted as regular
// expressions (so a '.' in one matches only a '.').
func (s Selection) Matchers() string {
	hl, zl := s.labels()
	alts := make([]string, len(s.Hosts))
	for i, h := range s.Hosts {
		alts[i] = regexp.QuoteMeta(h)
	}
	m := hl + "=~" + strconv.Quote(strings.Join(alts, "|"))
	if zl != NoZoneLabel {
		m += "," + zl + "=" + strconv.Quote(s.Zone)
	}
	return m
}

func (s Selection) labels() (host, zone string) {
	host, zone = s.HostLabel, s.ZoneLabel
	if host == "" {
		host = DefaultHostLabel
	}
	if zone == "" {
		zone = DefaultZoneLabel
	}
	return host, zone
}

// HostLabelName is the label that names a series' host.
func (s Selection) HostLabelName() string {
	h, _ := s.labels()
	return h
}

// Expand returns tmpl with $population replaced by s's matchers and
// $interval by step in whole seconds (at least 1s). tmpl is one
// CheckTemplate accepts.
func Expand(tmpl string, s Selection, step time.Duration) string {
	secs := max(1, int64(step/time.Second))
	return strings.NewReplacer(Population, s.Matchers(), Interval, strconv.FormatInt(secs, 10)+"s").Replace(tmpl)
}
