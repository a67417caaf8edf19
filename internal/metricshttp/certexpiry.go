package metricshttp

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strconv"

	"github.com/VictoriaMetrics/metrics"
)

// CertificateExpiryName is the family of the certificates a daemon
// presents: when each expires, as a Unix time in seconds, labelled use
// (what the daemon presents it for, e.g. "server" or "control_client").
// Alerts compare it with time() (deploy/prometheus/lehr-alerts.yaml).
const CertificateExpiryName = "lehr_tls_certificate_expiry_timestamp_seconds"

// TLSHelp is the HELP text of CertificateExpiryName; a daemon that calls
// RegisterCertificateExpiry merges it into its Help.
var TLSHelp = Help{
	CertificateExpiryName: "When the certificate the daemon presents expires (its NotAfter), as a Unix time in seconds, by use: server, client, control_client or etcd_client. Certificates are read at start: a renewed one counts after a restart.",
}

// RegisterCertificateExpiry adds to set the series
// lehr_tls_certificate_expiry_timestamp_seconds{use="use"}: the NotAfter
// of the certificate cfg presents — the earliest, if it has several. It
// adds nothing for a nil cfg or one without certificates (a
// GetCertificate callback's are not known in advance), and returns an
// error only for a certificate it cannot parse. Daemons read their
// certificates once, at start, so the value is fixed for the process's
// life.
func RegisterCertificateExpiry(set *metrics.Set, use string, cfg *tls.Config) error {
	if cfg == nil || len(cfg.Certificates) == 0 {
		return nil
	}
	var earliest float64
	for i, c := range cfg.Certificates {
		leaf := c.Leaf
		if leaf == nil {
			if len(c.Certificate) == 0 {
				continue
			}
			var err error
			if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
				return fmt.Errorf("metricshttp: %s certificate %d: %w", use, i, err)
			}
		}
		if t := float64(leaf.NotAfter.Unix()); earliest == 0 || t < earliest {
			earliest = t
		}
	}
	if earliest == 0 {
		return nil
	}
	set.GetOrCreateGauge(CertificateExpiryName+"{use="+strconv.Quote(use)+"}", nil).Set(earliest)
	return nil
}
