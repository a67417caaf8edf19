// Package logflags is the --log-level and --log-format flags every Lehr
// daemon takes, and the slog.Logger they describe. Importable by any
// command package.
package logflags

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// Flags holds the values of the two flags.
type Flags struct {
	Level  string // debug, info, warn or error
	Format string // text or json
}

// Register defines --log-level (default info) and --log-format (default
// text) on fs and returns where their values land.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.Level, "log-level", "info", "lowest `level` logged: debug, info, warn or error")
	fs.StringVar(&f.Format, "log-format", "text", "log `format`: text or json (for log collectors)")
	return f
}

// Validate reports a flag value that Logger would refuse.
func (f *Flags) Validate() error {
	_, err := f.handlerOptions()
	if err == nil && f.Format != "text" && f.Format != "json" {
		err = fmt.Errorf("--log-format %q: want text or json", f.Format)
	}
	return err
}

func (f *Flags) handlerOptions() (*slog.HandlerOptions, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.Level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.Level)
	}
	return &slog.HandlerOptions{Level: lvl}, nil
}

// Logger returns a logger writing to w as the flags say.
func (f *Flags) Logger(w io.Writer) (*slog.Logger, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	ho, _ := f.handlerOptions()
	if f.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, ho)), nil
	}
	return slog.New(slog.NewTextHandler(w, ho)), nil
}
