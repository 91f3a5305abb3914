module goclock

go 1.21
