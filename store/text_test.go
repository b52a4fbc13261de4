package store

import "testing"

func TestPgText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain", "plain"},
		{`back\slash é`, `back\slash é`},
		{"a\x00b", `a\x00b`},
		{"a\xffb\\", `a\xffb\\`},
		{"\xe2\x82", `\xe2\x82`},
		{"ok é \x00", `ok é \x00`},
	} {
		if got := pgText(c.in); got != c.want {
			t.Errorf("pgText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	m := map[string]string{"k\x00": "v\xff", "x": "y"}
	got := pgTextMap(m)
	if len(got) != 2 || got[`k\x00`] != `v\xff` || got["x"] != "y" {
		t.Errorf("pgTextMap = %q", got)
	}
}
