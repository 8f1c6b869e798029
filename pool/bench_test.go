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
