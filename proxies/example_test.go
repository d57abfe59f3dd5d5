package proxies_test

import (
	"fmt"
	"strings"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
)

func ExampleParse() {
	list := "# office proxies\n" +
		"http://alice:s3cret@10.0.0.1:3128 pool=office rate=10/s\n" +
		"http://10.0.0.2:3128 pool=office\n" +
		"socks5h://[2001:db8::1] concurrency=8\n"
	ps, err := proxies.Parse("office.txt", strings.NewReader(list))
	if err != nil {
		fmt.Println(err)
		return
	}
	specs, names, budgetOf, err := proxies.Budgets(ps, limits.Spec{Concurrency: 4, Burst: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range ps {
		fmt.Println(p.Source(), p.ID)
	}
	for i, b := range specs {
		var members []int
		for p, of := range budgetOf {
			if of == i {
				members = append(members, p)
			}
		}
		fmt.Println(names[i], b.Concurrency, b.Rate, members)
	}
	fmt.Println(proxies.NewRedactor(ps).String(`Get "http://alice:s3cret@10.0.0.1:3128": s3cret rejected`))

	_, err = proxies.Parse("office.txt", strings.NewReader("http://alice:s3cret@10.0.0.1:99999\n"))
	fmt.Println(err)
	// Output:
	// office.txt:2 http://10.0.0.1:3128#1fe25d9a
	// office.txt:3 http://10.0.0.2:3128
	// office.txt:4 socks5h://[2001:db8::1]:1080
	// office 4 10/1s [0 1]
	// socks5h://[2001:db8::1]:1080 8 unlimited [2]
	// Get "http://10.0.0.1:3128": *** rejected
	// proxies: office.txt:1: bad proxy URL: port must be 1 to 65535
}
