package pool

import (
	"context"
	"testing"
	"time"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// BenchmarkCheckout measures a checkout and checkin of a warm server, the
// path every transaction of a pooled client takes.
func BenchmarkCheckout(b *testing.B) {
	cl := pgtest.New(b, pgtest.Options{})
	b.Run("serial", func(b *testing.B) {
		p := newTestPool(b, cl, 4, 10*time.Second)
		p.Checkin(checkout(b, p))
		b.ReportAllocs()
		for b.Loop() {
			s, err := p.Checkout(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			p.Checkin(s)
		}
	})
	b.Run("mixed", func(b *testing.B) {
		// Two startup sets, each with an idle server: every checkout
		// looks past the other set's server on the idle stack.
		p := newTestPool(b, cl, 4, 10*time.Second)
		sets := [2]Startup{{}, NewStartup(map[string]string{"DateStyle": "German, DMY"})}
		a, z := checkoutStartup(b, p, sets[1]), checkout(b, p)
		p.Checkin(a)
		p.Checkin(z)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s, err := p.CheckoutStartup(context.Background(), sets[i%2])
			if err != nil {
				b.Fatal(err)
			}
			p.Checkin(s)
			i++
		}
		if n := p.Stats.Opened.Load(); n != 2 {
			b.Fatalf("%d servers opened, want 2", n)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		p := newTestPool(b, cl, 4, 10*time.Second)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s, err := p.Checkout(context.Background())
				if err != nil {
					b.Error(err)
					return
				}
				p.Checkin(s)
			}
		})
	})
}
