// Package open turns a broker URL (LLMQ_BROKER) into a transport Publisher
// and Subscriber:
//
//	kafka://[user[:password]@]host:port[,host:port]/topic?group=llmq[&prefetch=N]
//	    [&key=id|tenant][&max_message_bytes=N]
//	    [&tls=true][&tls_ca=ca.pem][&tls_cert=cert.pem&tls_key=key.pem]
//	    [&tls_server_name=name][&tls_insecure_skip_verify=true]
//	    [&sasl=plain|scram-sha-256|scram-sha-512]
//	amqp://user:pass@host:port/vhost?queue=name[&queue_type=quorum|classic]
//	    [&max_priority=9][&delivery_limit=20][&prefetch=N]
//	amqps://... (the same over TLS)
//	memory://name[/queue]
//
// A missing topic or queue is DestDefault. memory://name is a process-wide
// in-memory broker shared by every Open of the same name.
//
// Kafka: key is the producer's message key (the job id by default, which
// spreads a tenant's backlog over the partitions); max_message_bytes is
// the brokers' message.max.bytes (1048588 by default). Any tls_ parameter
// turns TLS on; tls_insecure_skip_verify is for tests only. With sasl=,
// the user and password come from the URL's userinfo or, better (a URL is
// seen in process lists and logs), from LLMQ_KAFKA_USERNAME and
// LLMQ_KAFKA_PASSWORD. An unknown kafka parameter is an error.
//
// RabbitMQ: delivery_limit is the quorum queues' x-delivery-limit (20 by
// default, -1 for none); other query parameters go to the AMQP client.
//
// Errors never repeat a password: a URL that does not parse is quoted with
// its userinfo masked.
package open
