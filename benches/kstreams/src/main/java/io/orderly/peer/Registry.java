package io.orderly.peer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.Map;

/** The Confluent schema-registry API (Apicurio's ccompat/v7 here): schema by id, register under a subject. */
public final class Registry {
    /** The registry answered that the id does not exist: the record is poison (unknown_schema). */
    public static final class UnknownId extends Exception {
        UnknownId(String message) { super(message); }
    }

    private static final ObjectMapper JSON = new ObjectMapper();
    private final String base;
    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    public Registry(String base) {
        this.base = base.endsWith("/") ? base.substring(0, base.length() - 1) : base;
    }

    /** GET {registry}/schemas/ids/{id}, field `schema`. IOException = transient (retry). */
    public String schemaById(int id) throws IOException, UnknownId, InterruptedException {
        HttpRequest request = HttpRequest.newBuilder(URI.create(base + "/schemas/ids/" + Integer.toUnsignedString(id)))
                .timeout(Duration.ofSeconds(10)).header("Accept", "application/vnd.schemaregistry.v1+json").GET().build();
        HttpResponse<String> response = http.send(request, HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() == 404) throw new UnknownId("schema id " + Integer.toUnsignedString(id) + " is not in the registry");
        if (response.statusCode() / 100 != 2) throw new IOException("registry answered " + response.statusCode() + ": " + response.body());
        JsonNode schema = JSON.readTree(response.body()).get("schema");
        if (schema == null || !schema.isTextual()) throw new IOException("registry answer has no `schema` field");
        return schema.asText();
    }

    /** POST {registry}/subjects/{subject}/versions; returns the schema's id. */
    public int register(String subject, String schema) throws IOException, InterruptedException {
        String body = JSON.writeValueAsString(Map.of("schema", schema));
        HttpRequest request = HttpRequest.newBuilder(URI.create(base + "/subjects/" + subject + "/versions"))
                .timeout(Duration.ofSeconds(10)).header("Content-Type", "application/vnd.schemaregistry.v1+json")
                .POST(HttpRequest.BodyPublishers.ofString(body)).build();
        HttpResponse<String> response = http.send(request, HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() / 100 != 2) throw new IOException("registering " + subject + ": " + response.statusCode() + " " + response.body());
        return JSON.readTree(response.body()).get("id").asInt();
    }
}
