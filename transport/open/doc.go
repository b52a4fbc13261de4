// Package open turns a broker URL (LLMQ_BROKER) into a transport Publisher
// and Subscriber:
//
//	kafka://host:port[,host:port]/topic?group=llmq[&prefetch=N]
//	amqp://user:pass@host:port/vhost?queue=name[&queue_type=quorum|classic][&max_priority=9][&prefetch=N]
//	amqps://... (the same over TLS)
//	memory://name[/queue]
//
// A missing topic or queue is DestDefault. memory://name is a process-wide
// in-memory broker shared by every Open of the same name.
package open
