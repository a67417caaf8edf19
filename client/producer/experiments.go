package producer

import (
	"context"
	"fmt"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"lehr.dev/lehr/internal/content"
	"lehr.dev/lehr/internal/names"
	"lehr.dev/lehr/proto/lehrpb"
)

// Policy preview (AIP-236, docs/preview.md). Experiments are named by
// their policy namespace ("payments/fw") and id ("deny-eu"); these methods
// build the resource names ("domains/payments/policies/fw/experiments/
// deny-eu"). The API's long-running operations complete when returned;
// these methods unpack them.

// PolicyName returns the resource name of policy namespace ns.
func PolicyName(ns string) string { return names.PolicyResource(ns) }

// ExperimentName returns the resource name of experiment id of ns.
func ExperimentName(ns, id string) string { return names.ExperimentResource(ns, id) }

// unpack returns an operation's error, or its response in into.
func unpack(op *longrunningpb.Operation, into proto.Message) error {
	if st := op.GetError(); st != nil {
		return fmt.Errorf("operation %s failed: %s", op.GetName(), st.GetMessage())
	}
	if !op.GetDone() {
		return fmt.Errorf("operation %s is not done; this client expects complete operations", op.GetName())
	}
	return op.GetResponse().UnmarshalTo(into)
}

// unpackMetadata unpacks a complete operation's metadata, for the calls
// whose response is Empty and whose result is in the metadata.
func unpackMetadata(op *longrunningpb.Operation, into proto.Message) error {
	if st := op.GetError(); st != nil {
		return fmt.Errorf("operation %s failed: %s", op.GetName(), st.GetMessage())
	}
	return op.GetMetadata().UnmarshalTo(into)
}

// GetPolicy returns policy namespace ns's live rules and etag.
func (c *Client) GetPolicy(ctx context.Context, ns string) (*lehrpb.Policy, error) {
	var out *lehrpb.Policy
	err := c.call(ctx, "get policy "+ns, func(ctx context.Context) (err error) {
		out, err = c.rpc.GetPolicy(ctx, &lehrpb.GetPolicyRequest{Name: PolicyName(ns)})
		return err
	})
	return out, err
}

// CreateExperiment creates experiment id of policy ns with rules (one
// property per rule; none previews deleting the policy).
func (c *Client) CreateExperiment(ctx context.Context, ns, id string, rules []Property, annotations map[string]string) (*lehrpb.PolicyExperiment, error) {
	out := new(lehrpb.PolicyExperiment)
	err := c.call(ctx, "create experiment "+ns+"/"+id, func(ctx context.Context) error {
		op, err := c.rpc.CreatePolicyExperiment(ctx, &lehrpb.CreatePolicyExperimentRequest{
			Parent: PolicyName(ns), PolicyExperimentId: id,
			PolicyExperiment: &lehrpb.PolicyExperiment{Policy: &lehrpb.Policy{Name: PolicyName(ns), Rules: content.ToProto(rules)}, Annotations: annotations},
		})
		if err != nil {
			return err
		}
		return unpack(op, out)
	})
	return out, err
}

// UpdateExperiment replaces the rules (if setRules) and the annotations
// (if annotations is not nil) of an experiment; etag, if set, must be its
// current etag. An active experiment is suspended.
func (c *Client) UpdateExperiment(ctx context.Context, ns, id string, setRules bool, rules []Property, annotations map[string]string, etag string) (*lehrpb.PolicyExperiment, error) {
	var mask []string
	if setRules {
		mask = append(mask, "policy")
	}
	if annotations != nil {
		mask = append(mask, "annotations")
	}
	if len(mask) == 0 {
		return nil, fmt.Errorf("producer: update experiment %s/%s: nothing to update; give rules or annotations", ns, id)
	}
	out := new(lehrpb.PolicyExperiment)
	err := c.call(ctx, "update experiment "+ns+"/"+id, func(ctx context.Context) error {
		op, err := c.rpc.UpdatePolicyExperiment(ctx, &lehrpb.UpdatePolicyExperimentRequest{
			PolicyExperiment: &lehrpb.PolicyExperiment{Name: ExperimentName(ns, id),
				Policy: &lehrpb.Policy{Name: PolicyName(ns), Rules: content.ToProto(rules)}, Annotations: annotations},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: mask}, Etag: etag,
			// The same paths the old way, for a control that predates
			// update_mask: without them it would replace both fields.
			LegacyUpdateMask: mask,
		})
		if err != nil {
			return err
		}
		return unpack(op, out)
	})
	return out, err
}

// Experiment returns one experiment.
func (c *Client) Experiment(ctx context.Context, ns, id string) (*lehrpb.PolicyExperiment, error) {
	var out *lehrpb.PolicyExperiment
	err := c.call(ctx, "get experiment "+ns+"/"+id, func(ctx context.Context) (err error) {
		out, err = c.rpc.GetPolicyExperiment(ctx, &lehrpb.GetPolicyExperimentRequest{Name: ExperimentName(ns, id)})
		return err
	})
	return out, err
}

// Experiments lists the experiments of ns matching an AIP-160 filter
// ("" for all; "preview_metadata.state = ACTIVE" for those previewing).
func (c *Client) Experiments(ctx context.Context, ns, filter string) ([]*lehrpb.PolicyExperiment, error) {
	var out []*lehrpb.PolicyExperiment
	token := ""
	for {
		var resp *lehrpb.ListPolicyExperimentsResponse
		err := c.call(ctx, "list experiments of "+ns, func(ctx context.Context) (err error) {
			resp, err = c.rpc.ListPolicyExperiments(ctx, &lehrpb.ListPolicyExperimentsRequest{Parent: PolicyName(ns), Filter: filter, PageToken: token})
			return err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetPolicyExperiments()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// DeleteExperiment deletes an experiment (etag, if set, must be its
// current etag) and returns it as it was.
func (c *Client) DeleteExperiment(ctx context.Context, ns, id, etag string) (*lehrpb.PolicyExperiment, error) {
	out := new(lehrpb.PolicyExperiment)
	err := c.call(ctx, "delete experiment "+ns+"/"+id, func(ctx context.Context) error {
		op, err := c.rpc.DeletePolicyExperiment(ctx, &lehrpb.DeletePolicyExperimentRequest{Name: ExperimentName(ns, id), Etag: etag})
		if err != nil {
			return err
		}
		return unpack(op, out)
	})
	return out, err
}

// StartPreview starts previewing an experiment (start) or stops it.
func (c *Client) StartPreview(ctx context.Context, ns, id string, start bool) (*lehrpb.PolicyExperiment, error) {
	out := new(lehrpb.PolicyExperiment)
	verb := "stop"
	if start {
		verb = "start"
	}
	err := c.call(ctx, verb+" previewing "+ns+"/"+id, func(ctx context.Context) error {
		var op *longrunningpb.Operation
		var err error
		if start {
			op, err = c.rpc.StartPreviewPolicyExperiment(ctx, &lehrpb.StartPreviewPolicyExperimentRequest{Name: ExperimentName(ns, id)})
		} else {
			op, err = c.rpc.StopPreviewPolicyExperiment(ctx, &lehrpb.StopPreviewPolicyExperimentRequest{Name: ExperimentName(ns, id)})
		}
		if err != nil {
			return err
		}
		return unpack(op, out)
	})
	return out, err
}

// CommitExperiment makes an experiment the live policy (req.Name is set
// from ns and id) and returns the operation's metadata: the live policy's
// new version and the deny share change its canary analysis expects.
func (c *Client) CommitExperiment(ctx context.Context, ns, id string, req *lehrpb.CommitPolicyExperimentRequest) (*lehrpb.CommitPolicyExperimentMetadata, error) {
	r := proto.CloneOf(req)
	r.Name = ExperimentName(ns, id)
	md := new(lehrpb.CommitPolicyExperimentMetadata)
	err := c.call(ctx, "commit experiment "+ns+"/"+id, func(ctx context.Context) error {
		op, err := c.rpc.CommitPolicyExperiment(ctx, r)
		if err != nil {
			return err
		}
		return unpackMetadata(op, md)
	})
	return md, err
}

// DeletePolicy deletes the live policy of namespace ns and, in the same
// step, every experiment of it: its next version is the no-op policy. A
// non-empty etag ("v{version}") deletes only if it is still the live
// policy's. It returns the operation's metadata: the new version and the
// deleted experiments.
func (c *Client) DeletePolicy(ctx context.Context, ns, etag, message string) (*lehrpb.DeletePolicyMetadata, error) {
	md := new(lehrpb.DeletePolicyMetadata)
	err := c.call(ctx, "delete policy "+ns, func(ctx context.Context) error {
		op, err := c.rpc.DeletePolicy(ctx, &lehrpb.DeletePolicyRequest{Name: PolicyName(ns), Etag: etag, Message: message})
		if err != nil {
			return err
		}
		return unpackMetadata(op, md)
	})
	return md, err
}

// ExperimentCounts returns the decisions hosts counted for an experiment.
func (c *Client) ExperimentCounts(ctx context.Context, ns, id string) (*lehrpb.PolicyExperimentCounts, error) {
	var out *lehrpb.PolicyExperimentCounts
	err := c.call(ctx, "count experiment "+ns+"/"+id, func(ctx context.Context) (err error) {
		out, err = c.rpc.GetPolicyExperimentCounts(ctx, &lehrpb.GetPolicyExperimentCountsRequest{Name: ExperimentName(ns, id)})
		return err
	})
	return out, err
}
