package producer

import (
	"context"

	"lehr.dev/lehr/proto/lehrpb"
)

// CreateZone registers a zone; its goals start at every namespace's latest
// version.
func (c *Client) CreateZone(ctx context.Context, name string) (*lehrpb.Zone, error) {
	var out *lehrpb.Zone
	err := c.call(ctx, "create zone "+name, func(ctx context.Context) (err error) {
		out, err = c.rpc.CreateZone(ctx, &lehrpb.CreateZoneRequest{Name: name})
		return err
	})
	return out, err
}

// DeleteZone retires zone: its goals and reports go, and rollouts stop
// reaching it. Refused (FailedPrecondition) while its distributors
// report, unless force.
func (c *Client) DeleteZone(ctx context.Context, name string, force bool) error {
	return c.call(ctx, "delete zone "+name, func(ctx context.Context) error {
		_, err := c.rpc.DeleteZone(ctx, &lehrpb.DeleteZoneRequest{Name: name, Force: force})
		return err
	})
}

// ListZones returns every registered zone, sorted by name.
func (c *Client) ListZones(ctx context.Context) ([]*lehrpb.Zone, error) {
	var resp *lehrpb.ListZonesResponse
	err := c.call(ctx, "list zones", func(ctx context.Context) (err error) {
		resp, err = c.rpc.ListZones(ctx, &lehrpb.ListZonesRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetZones(), nil
}

// GetGoals returns a zone's goal states and the store revision they were read
// at. A non-empty namespace restricts the answer to that namespace.
func (c *Client) GetGoals(ctx context.Context, zone, namespace string) (*lehrpb.GetGoalsResponse, error) {
	var resp *lehrpb.GetGoalsResponse
	err := c.call(ctx, "get goals of zone "+zone, func(ctx context.Context) (err error) {
		resp, err = c.rpc.GetGoals(ctx, &lehrpb.GetGoalsRequest{Zone: zone, Namespace: namespace})
		return err
	})
	return resp, err
}

// GetStoreStatus returns how full control's store is and what each domain
// stores in it.
func (c *Client) GetStoreStatus(ctx context.Context) (*lehrpb.StoreStatus, error) {
	var resp *lehrpb.StoreStatus
	err := c.call(ctx, "get store status", func(ctx context.Context) (err error) {
		resp, err = c.rpc.GetStoreStatus(ctx, &lehrpb.GetStoreStatusRequest{})
		return err
	})
	return resp, err
}

// GetControlStatus returns what the control replica answering knows of
// its store and of the replicas sharing it: the store's identity, its
// etcd, the registered replicas, the strategist's leader, and which
// replica answered.
func (c *Client) GetControlStatus(ctx context.Context) (*lehrpb.ControlStatus, error) {
	var resp *lehrpb.ControlStatus
	err := c.call(ctx, "get control status", func(ctx context.Context) (err error) {
		resp, err = c.rpc.GetControlStatus(ctx, &lehrpb.GetControlStatusRequest{})
		return err
	})
	return resp, err
}
