package actors

import (
	"errors"
	"testing"

	"github.com/heraldmq/herald/net/wire"
)

// A refusal says what is wrong: another tenant's stream names the tenant
// the credentials have, a namespace outside theirs names their namespaces,
// and a missing permission names the permissions they hold, never every
// permission as if all were missing.
func TestPrincipalRefusals(t *testing.T) {
	shop := Principal{Name: "shop-writer", Tenant: "acme", Perms: PermPublish | PermSubscribe, Namespaces: []string{"shop", "web"}}
	name := func(tenant, ns string) wire.StreamName {
		return wire.StreamName{Tenant: tenant, Namespace: ns, Stream: "orders"}
	}
	tests := []struct {
		perm Permission
		name wire.StreamName
		want string // "" allows
	}{
		{PermPublish, name("acme", "shop"), ""},
		{PermAll, name("acme", "web"), ""}, // any one permission allows a describe
		{PermAll, name("globex", "shop"), `credentials "shop-writer" belong to tenant acme: globex/shop/orders is in tenant globex`},
		{PermPublish, name("globex", "billing"), `credentials "shop-writer" belong to tenant acme: globex/billing/orders is in tenant globex`},
		{PermPublish, name("acme", "billing"), `credentials "shop-writer" of tenant acme are limited to namespaces shop,web: acme/billing/orders is in namespace billing`},
		{PermManage, name("acme", "shop"), `credentials "shop-writer" of tenant acme do not allow manage (they allow publish,subscribe)`},
		{PermConsume | PermManage, name("acme", "shop"), `credentials "shop-writer" of tenant acme do not allow any of consume,manage (they allow publish,subscribe)`},
	}
	for _, tc := range tests {
		err := shop.Allow(tc.perm, tc.name)
		if tc.want == "" {
			if err != nil {
				t.Errorf("Allow(%s, %s) = %v, want nil", tc.perm, tc.name, err)
			}
			continue
		}
		if err == nil || err.Code != wire.CodePermissionDenied || err.Message != tc.want {
			t.Errorf("Allow(%s, %s) = %v\nwant permission_denied: %s", tc.perm, tc.name, err, tc.want)
		}
	}
	if err := (&Principal{Name: "none", Tenant: "acme"}).Allow(PermPublish, name("acme", "x")); err == nil ||
		err.Message != `credentials "none" of tenant acme do not allow publish (they allow none)` {
		t.Errorf("no permissions: %v", err)
	}
	if err := DevPrincipal.Allow(PermAll, name("anyone", "x")); err != nil {
		t.Errorf("dev: %v", err)
	}

	lists := []struct {
		p                 Principal
		tenant, namespace string
		wantTenant, want  string
	}{
		{shop, "", "", "", `credentials "shop-writer" of tenant acme do not allow manage (they allow publish,subscribe)`},
		{Principal{Name: "ops", Tenant: "acme", Perms: PermManage}, "", "", "acme", ""},
		{Principal{Name: "ops", Tenant: "acme", Perms: PermManage}, "globex", "", "", `credentials "ops" belong to tenant acme: they cannot list tenant globex`},
		{Principal{Name: "ops", Tenant: "acme", Perms: PermManage, Namespaces: []string{"shop"}}, "acme", "web", "",
			`credentials "ops" of tenant acme are limited to namespaces shop: they cannot list namespace web`},
		{DevPrincipal, "", "", "default", ""},
		{DevPrincipal, "globex", "", "globex", ""},
	}
	for _, tc := range lists {
		tenant, err := tc.p.AllowList(tc.tenant, tc.namespace)
		switch {
		case tc.want == "" && (err != nil || tenant != tc.wantTenant):
			t.Errorf("%s AllowList(%q, %q) = %q, %v; want %q", tc.p.Name, tc.tenant, tc.namespace, tenant, err, tc.wantTenant)
		case tc.want != "" && (err == nil || err.Message != tc.want || !errors.Is(err, &wire.Error{Code: wire.CodePermissionDenied})):
			t.Errorf("%s AllowList(%q, %q) = %v\nwant %s", tc.p.Name, tc.tenant, tc.namespace, err, tc.want)
		}
	}
}
